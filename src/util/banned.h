/* Functions with no bound on what they write, banned as in git: use kl_strbuf or kl_snprintf. */
#ifndef KL_BANNED_H
#define KL_BANNED_H
#undef strcpy
#define strcpy(a, b) BANNED_strcpy_use_kl_snprintf
#undef strcat
#define strcat(a, b) BANNED_strcat_use_kl_strbuf
#undef sprintf
#define sprintf(...) BANNED_sprintf_use_kl_snprintf
#undef vsprintf
#define vsprintf(...) BANNED_vsprintf_use_kl_strbuf
#undef gets
#define gets(a) BANNED_gets
#endif
