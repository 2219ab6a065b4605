#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "util/util.h"

struct kl_hasher {
    EVP_MD_CTX *ctx;
};

static void to_hex(const unsigned char *d, unsigned n, char hex[KL_HASH_HEX])
{
    static const char digits[] = "0123456789abcdef";
    for (unsigned i = 0; i < n && i < 32; i++) {
        hex[2 * i] = digits[d[i] >> 4];
        hex[2 * i + 1] = digits[d[i] & 15];
    }
    hex[64] = '\0';
}

kl_hasher *kl_hasher_new(void)
{
    kl_hasher *h = calloc(1, sizeof *h);
    if (!h) return NULL;
    h->ctx = EVP_MD_CTX_new();
    if (!h->ctx || EVP_DigestInit_ex(h->ctx, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(h->ctx);
        free(h);
        return NULL;
    }
    return h;
}

void kl_hasher_part(kl_hasher *h, const void *data, size_t len)
{
    if (!h) return;
    unsigned char prefix[9];
    prefix[0] = 'p';
    for (int i = 0; i < 8; i++) prefix[1 + i] = (unsigned char)((uint64_t)len >> (8 * i));
    EVP_DigestUpdate(h->ctx, prefix, sizeof prefix);
    if (len) EVP_DigestUpdate(h->ctx, data, len);
}

void kl_hasher_parts(kl_hasher *h, const char *s)
{
    if (!h) return;
    if (!s) {
        EVP_DigestUpdate(h->ctx, "n", 1);
        return;
    }
    kl_hasher_part(h, s, strlen(s));
}

void kl_hasher_finish(kl_hasher *h, char hex[KL_HASH_HEX])
{
    if (!h) {
        memset(hex, '0', 64);
        hex[64] = '\0';
        return;
    }
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    EVP_DigestFinal_ex(h->ctx, d, &n);
    to_hex(d, n, hex);
    EVP_MD_CTX_free(h->ctx);
    free(h);
}

void kl_hash_hex(const void *data, size_t len, char hex[KL_HASH_HEX])
{
    unsigned char d[EVP_MAX_MD_SIZE];
    unsigned n = 0;
    EVP_Digest(data, len, d, &n, EVP_sha256(), NULL);
    to_hex(d, n, hex);
}
