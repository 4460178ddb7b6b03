/*
 * mixed_load's built-in profiles: the files of bench/profiles/, compiled in
 * by bench/embed_profiles.cmake (so the tool and the files cannot drift).
 */
#ifndef HB_PROFILES_H
#define HB_PROFILES_H

struct hb_builtin_profile {
    const char *name; /* the file name without .txt */
    const char *text; /* the file's bytes, NUL-terminated */
};

/* Sorted by name, ended by {NULL, NULL}. */
extern const struct hb_builtin_profile hb_builtin_profiles[];

#endif /* HB_PROFILES_H */
