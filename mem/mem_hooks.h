/*
 * Memory hooks (mem_hooks.c): the registration cache's view of memory that
 * goes back to the system. Private to mem/ and its unit tests.
 */
#ifndef HC_MEM_HOOKS_H
#define HC_MEM_HOOKS_H

#include "base/hc_base.h"

/* Patches the GOT slots of every loaded object that call the unmap family
 * (munmap, mremap, madvise, mmap, mmap64, shmdt, brk, sbrk, free, realloc,
 * malloc_trim) so that they go through our wrappers, which report the range
 * to hc_mem_reg_cache_unmapped. Idempotent and thread-safe; the patches stay
 * for the life of the process (the wrappers are pass-through while the cache
 * watches no record). ERR_UNSUPPORTED where the ELF relocation types are not
 * known (architectures other than x86_64 and aarch64). */
hcomm_status_t hc_mem_hooks_install(void);

/* Patches the objects loaded since the last walk (dlopen), if any: one
 * dl_iterate_phdr step when nothing changed. No-op before install. */
void hc_mem_hooks_refresh(void);

/* GOT slots patched so far (for tests and debug logs). */
unsigned hc_mem_hooks_slots(void);

#endif /* HC_MEM_HOOKS_H */
