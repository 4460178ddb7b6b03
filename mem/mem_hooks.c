/*
 * Memory hooks: the registration cache must learn when user memory goes back
 * to the system, or a later buffer at the same address would hit a record
 * whose pinned pages are the old ones (a stale registration: the NIC reads
 * and writes pages the process no longer sees).
 *
 * We do it the way UCX's "reloc" hooks do: in every loaded object, the GOT
 * slots through which it calls munmap, mremap, madvise, mmap, mmap64, shmdt,
 * brk, sbrk, free, realloc and malloc_trim (R_*_JUMP_SLOT and R_*_GLOB_DAT
 * relocations against those names) are pointed at the wrappers below. A
 * wrapper tells the cache which range is about to go away, then calls the
 * original: the definition the dynamic linker binds by default (dlsym
 * RTLD_DEFAULT), so a sanitizer's interceptor stays in the chain. Wrappers
 * report before the real call: once the range is unmapped another thread
 * may map it again, and must not find the old record.
 *
 * glibc's malloc unmaps a big chunk with an internal munmap that no GOT
 * sees, and trims its heaps with internal sbrk/madvise calls; the free and
 * realloc wrappers therefore read glibc's chunk header: an mmapped chunk
 * (IS_MMAPPED) reports its whole mapping, a chunk of a secondary arena of at
 * least a page reports itself, and for the main arena the program break is
 * compared before and after the call (a trim lowers it). With another
 * allocator (a sanitizer's, jemalloc...) the wrapper reports
 * [p, p + malloc_usable_size(p)) when that is at least a page.
 *
 * Not seen: raw syscalls; calls made inside libc, libpthread, the dynamic
 * loader and the sanitizer runtimes (not patched, see hc_mem_hooks_skip);
 * statically linked code (no GOT slot); slots bound to something other than
 * the default definition (left alone); objects dlopen'ed since the last walk
 * (hc_mem_hooks_refresh re-walks at the next cache lookup).
 *
 * Cost: while the cache watches no record every wrapper is one relaxed load
 * and the real call; patching happens once per object and stays for the
 * process life.
 */
#include "mem/mem_hooks.h"
#include "mem/mem_int.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#if defined(__x86_64__)
#define HC_MEM_R_JUMP_SLOT R_X86_64_JUMP_SLOT
#define HC_MEM_R_GLOB_DAT R_X86_64_GLOB_DAT
#elif defined(__aarch64__)
#define HC_MEM_R_JUMP_SLOT R_AARCH64_JUMP_SLOT
#define HC_MEM_R_GLOB_DAT R_AARCH64_GLOB_DAT
#endif

#ifndef MADV_DONTNEED_LOCKED
#define MADV_DONTNEED_LOCKED 24
#endif
#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4
#endif

#ifdef HC_MEM_R_JUMP_SLOT

/* glibc malloc chunk header (malloc/malloc.c): the size word just before
 * the user pointer, its low bits flags; the word before it is prev_size,
 * which for an mmapped chunk is the offset of the chunk in its mapping. */
#define HC_MEM_CHUNK_MMAPPED 0x2
#define HC_MEM_CHUNK_NON_MAIN 0x4
#define HC_MEM_CHUNK_SIZE_BITS 0x7
#define HC_MEM_CHUNK_HDR (2 * sizeof(size_t))

enum {
    HC_HOOK_MUNMAP,
    HC_HOOK_MREMAP,
    HC_HOOK_MADVISE,
    HC_HOOK_MMAP,
    HC_HOOK_MMAP64,
    HC_HOOK_SHMDT,
    HC_HOOK_BRK,
    HC_HOOK_SBRK,
    HC_HOOK_FREE,
    HC_HOOK_REALLOC,
    HC_HOOK_MALLOC_TRIM,
    HC_HOOK_COUNT
};

typedef int (*hc_munmap_fn)(void *, size_t);
typedef void *(*hc_mremap_fn)(void *, size_t, size_t, int, ...);
typedef int (*hc_madvise_fn)(void *, size_t, int);
typedef void *(*hc_mmap_fn)(void *, size_t, int, int, int, off_t);
typedef int (*hc_shmdt_fn)(const void *);
typedef int (*hc_brk_fn)(void *);
typedef void *(*hc_sbrk_fn)(intptr_t);
typedef void (*hc_free_fn)(void *);
typedef void *(*hc_realloc_fn)(void *, size_t);
typedef int (*hc_malloc_trim_fn)(size_t);
typedef size_t (*hc_usable_fn)(void *);

static struct {
    pthread_mutex_t lock; /* serializes walks */
    bool installed;
    bool glibc_malloc; /* free is glibc's: its chunk header can be read */
    size_t page;
    void *orig[HC_HOOK_COUNT]; /* written before the first patch, then read-only */
    hc_usable_fn usable;       /* malloc_usable_size of a foreign allocator */
    unsigned long long adds;   /* dlpi_adds at the last walk */
    unsigned slots;            /* GOT slots patched */
    unsigned foreign;          /* slots left alone: bound to another definition */
    unsigned mprotect_failures;
} hc_mem_hooks = {.lock = PTHREAD_MUTEX_INITIALIZER};

static inline void *hc_mem_hooks_orig(int i)
{
    return __atomic_load_n(&hc_mem_hooks.orig[i], __ATOMIC_ACQUIRE);
}

static inline bool hc_mem_hooks_watching(void)
{
    return atomic_load_explicit(&hc_mem_reg_cache_watched, memory_order_relaxed) != 0;
}

static inline void hc_mem_hooks_gone(const void *addr, size_t len)
{
    if (HC_UNLIKELY(hc_mem_hooks_watching())) hc_mem_reg_cache_unmapped(addr, len);
}

/* ---- wrappers ----------------------------------------------------------- */

static int hc_mem_hook_munmap(void *addr, size_t len)
{
    hc_mem_hooks_gone(addr, len);
    return ((hc_munmap_fn)hc_mem_hooks_orig(HC_HOOK_MUNMAP))(addr, len);
}

static void *hc_mem_hook_mremap(void *old, size_t old_len, size_t new_len, int flags, ...)
{
    void *new_addr = NULL;
    if (flags & (MREMAP_FIXED | MREMAP_DONTUNMAP)) {
        va_list ap;
        va_start(ap, flags);
        new_addr = va_arg(ap, void *);
        va_end(ap);
    }
    /* The old range loses its pages whether the mapping moves, grows in
     * place or stays behind empty (MREMAP_DONTUNMAP); a fixed target range
     * is replaced. */
    hc_mem_hooks_gone(old, old_len);
    if (flags & MREMAP_FIXED) hc_mem_hooks_gone(new_addr, new_len);
    return ((hc_mremap_fn)hc_mem_hooks_orig(HC_HOOK_MREMAP))(old, old_len, new_len, flags,
                                                             new_addr);
}

static int hc_mem_hook_madvise(void *addr, size_t len, int advice)
{
    if (advice == MADV_DONTNEED || advice == MADV_FREE || advice == MADV_REMOVE ||
        advice == MADV_DONTNEED_LOCKED)
        hc_mem_hooks_gone(addr, len);
    return ((hc_madvise_fn)hc_mem_hooks_orig(HC_HOOK_MADVISE))(addr, len, advice);
}

static void *hc_mem_hook_mmap_common(int which, void *addr, size_t len, int prot, int flags, int fd,
                                     off_t off)
{
    /* MAP_FIXED replaces whatever was there; MAP_FIXED_NOREPLACE fails instead. */
    if ((flags & MAP_FIXED) && !(flags & MAP_FIXED_NOREPLACE)) hc_mem_hooks_gone(addr, len);
    return ((hc_mmap_fn)hc_mem_hooks_orig(which))(addr, len, prot, flags, fd, off);
}

static void *hc_mem_hook_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    return hc_mem_hook_mmap_common(HC_HOOK_MMAP, addr, len, prot, flags, fd, off);
}

static void *hc_mem_hook_mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    return hc_mem_hook_mmap_common(HC_HOOK_MMAP64, addr, len, prot, flags, fd, off);
}

/* Length of the mapping that starts at addr plus the ones right after it
 * from the same file (a SysV segment is one mapping unless mprotect split
 * it), read from /proc/self/maps without malloc; 0 when none starts there. */
static HC_NOINLINE size_t hc_mem_hooks_segment_len(uintptr_t addr)
{
    int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    char buf[4096];
    size_t have = 0;
    uintptr_t seg_end = 0;
    unsigned dev_major = 0, dev_minor = 0;
    unsigned long long ino = 0;
    bool found = false, done = false;
    while (!done) {
        ssize_t n = read(fd, buf + have, sizeof(buf) - 1 - have);
        if (n <= 0) break;
        have += (size_t)n;
        buf[have] = '\0';
        char *line = buf, *nl;
        while (!done && (nl = strchr(line, '\n'))) {
            *nl = '\0';
            unsigned long start, end;
            unsigned ma, mi;
            unsigned long long in;
            if (sscanf(line, "%lx-%lx %*s %*x %x:%x %llu", &start, &end, &ma, &mi, &in) == 5) {
                if (!found && start == addr) {
                    found = true;
                    seg_end = end;
                    dev_major = ma;
                    dev_minor = mi;
                    ino = in;
                } else if (found && start == seg_end && ma == dev_major && mi == dev_minor &&
                           in == ino) {
                    seg_end = end;
                } else if (found || start > addr) {
                    done = true;
                }
            }
            line = nl + 1;
        }
        have -= (size_t)(line - buf);
        memmove(buf, line, have);
        if (have == sizeof(buf) - 1) have = 0; /* a line that long is not a mapping */
    }
    close(fd);
    return found ? (size_t)(seg_end - addr) : 0;
}

static int hc_mem_hook_shmdt(const void *addr)
{
    if (HC_UNLIKELY(hc_mem_hooks_watching())) {
        size_t len = hc_mem_hooks_segment_len((uintptr_t)addr);
        if (len) hc_mem_reg_cache_unmapped(addr, len);
    }
    return ((hc_shmdt_fn)hc_mem_hooks_orig(HC_HOOK_SHMDT))(addr);
}

static void *hc_mem_hooks_break(void)
{
    hc_sbrk_fn sbrk_fn = (hc_sbrk_fn)hc_mem_hooks_orig(HC_HOOK_SBRK);
    return sbrk_fn ? sbrk_fn(0) : NULL;
}

static int hc_mem_hook_brk(void *addr)
{
    if (HC_UNLIKELY(hc_mem_hooks_watching())) {
        uintptr_t cur = (uintptr_t)hc_mem_hooks_break();
        if ((uintptr_t)addr < cur) hc_mem_reg_cache_unmapped(addr, cur - (uintptr_t)addr);
    }
    return ((hc_brk_fn)hc_mem_hooks_orig(HC_HOOK_BRK))(addr);
}

static void *hc_mem_hook_sbrk(intptr_t inc)
{
    if (HC_UNLIKELY(inc < 0 && hc_mem_hooks_watching())) {
        size_t n = (size_t)0 - (size_t)inc;
        uintptr_t cur = (uintptr_t)hc_mem_hooks_break();
        if (n <= cur) hc_mem_reg_cache_unmapped((void *)(cur - n), n);
    }
    return ((hc_sbrk_fn)hc_mem_hooks_orig(HC_HOOK_SBRK))(inc);
}

/* free(p) or realloc(p, size) while the cache watches records; returns
 * realloc's result. The range p's chunk gives back is reported before the
 * call; for glibc's main arena, whose chunks stay mapped until a trim lowers
 * the program break, the released range is seen after it. */
static HC_NOINLINE void *hc_mem_hooks_release(void *p, bool is_realloc, size_t size)
{
    bool main_arena = false;
    if (hc_mem_hooks.glibc_malloc) {
        size_t hdr = ((const size_t *)p)[-1];
        size_t csize = hdr & ~(size_t)HC_MEM_CHUNK_SIZE_BITS;
        uintptr_t chunk = (uintptr_t)p - HC_MEM_CHUNK_HDR;
        if (hdr & HC_MEM_CHUNK_MMAPPED) {
            size_t pad = ((const size_t *)p)[-2];
            hc_mem_reg_cache_unmapped((void *)(chunk - pad), pad + csize);
        } else if (hdr & HC_MEM_CHUNK_NON_MAIN) {
            if (csize >= hc_mem_hooks.page) hc_mem_reg_cache_unmapped((void *)chunk, csize);
        } else {
            main_arena = true;
        }
    } else if (hc_mem_hooks.usable) {
        size_t n = hc_mem_hooks.usable(p);
        if (n >= hc_mem_hooks.page) hc_mem_reg_cache_unmapped(p, n);
    }
    uintptr_t before = main_arena ? (uintptr_t)hc_mem_hooks_break() : 0;
    void *ret = NULL;
    if (is_realloc)
        ret = ((hc_realloc_fn)hc_mem_hooks_orig(HC_HOOK_REALLOC))(p, size);
    else
        ((hc_free_fn)hc_mem_hooks_orig(HC_HOOK_FREE))(p);
    if (main_arena) {
        uintptr_t after = (uintptr_t)hc_mem_hooks_break();
        if (after < before) hc_mem_reg_cache_unmapped((void *)after, before - after);
    }
    return ret;
}

static void hc_mem_hook_free(void *p)
{
    if (HC_UNLIKELY(hc_mem_hooks_watching()) && p) {
        hc_mem_hooks_release(p, false, 0);
        return;
    }
    ((hc_free_fn)hc_mem_hooks_orig(HC_HOOK_FREE))(p);
}

static void *hc_mem_hook_realloc(void *p, size_t size)
{
    if (HC_UNLIKELY(hc_mem_hooks_watching()) && p) return hc_mem_hooks_release(p, true, size);
    return ((hc_realloc_fn)hc_mem_hooks_orig(HC_HOOK_REALLOC))(p, size);
}

/* malloc_trim gives back free pages inside every arena (MADV_DONTNEED on
 * free chunks): where is not known, so every record goes. It is rare. */
static int hc_mem_hook_malloc_trim(size_t pad)
{
    if (HC_UNLIKELY(hc_mem_hooks_watching())) hc_mem_reg_cache_unmapped(NULL, SIZE_MAX);
    return ((hc_malloc_trim_fn)hc_mem_hooks_orig(HC_HOOK_MALLOC_TRIM))(pad);
}

static const struct {
    const char *name;
    void *wrapper;
} hc_mem_hooks_tab[HC_HOOK_COUNT] = {
    [HC_HOOK_MUNMAP] = {"munmap", (void *)hc_mem_hook_munmap},
    [HC_HOOK_MREMAP] = {"mremap", (void *)hc_mem_hook_mremap},
    [HC_HOOK_MADVISE] = {"madvise", (void *)hc_mem_hook_madvise},
    [HC_HOOK_MMAP] = {"mmap", (void *)hc_mem_hook_mmap},
    [HC_HOOK_MMAP64] = {"mmap64", (void *)hc_mem_hook_mmap64},
    [HC_HOOK_SHMDT] = {"shmdt", (void *)hc_mem_hook_shmdt},
    [HC_HOOK_BRK] = {"brk", (void *)hc_mem_hook_brk},
    [HC_HOOK_SBRK] = {"sbrk", (void *)hc_mem_hook_sbrk},
    [HC_HOOK_FREE] = {"free", (void *)hc_mem_hook_free},
    [HC_HOOK_REALLOC] = {"realloc", (void *)hc_mem_hook_realloc},
    [HC_HOOK_MALLOC_TRIM] = {"malloc_trim", (void *)hc_mem_hook_malloc_trim},
};

/* ---- patching ----------------------------------------------------------- */

typedef ElfW(Addr) hc_elf_addr_t;
typedef ElfW(Dyn) hc_elf_dyn_t;
typedef ElfW(Phdr) hc_elf_phdr_t;
typedef ElfW(Rela) hc_elf_rela_t;
typedef ElfW(Sym) hc_elf_sym_t;

/* Objects left alone: the vDSO; the dynamic loader (it has its own
 * allocator); libc and libpthread, whose internal calls do not go through
 * their GOT anyway, and whose few that do (realloc in pthread_getattr_np...)
 * also serve sanitizer runtimes at times when instrumented code such as our
 * wrappers cannot run (a new thread before TSan knows it); and the sanitizer
 * runtimes (their interceptors are the originals we chain to). */
static bool hc_mem_hooks_skip(const char *name)
{
    static const char *const prefixes[] = {
        "linux-vdso", "linux-gate", "ld-linux", "ld64.so",  "ld.so",     "libc.so", "libpthread.so",
        "libasan",    "libtsan",    "liblsan",  "libubsan", "libhwasan", "libmsan", "libclang_rt."};
    const char *base = strrchr(name, '/');
    base = base ? base + 1 : name;
    for (size_t i = 0; i < HC_ARRAY_SIZE(prefixes); i++)
        if (!strncmp(base, prefixes[i], strlen(prefixes[i]))) return true;
    return false;
}

/* ld.so rewrites the address entries of a loaded object's dynamic section
 * to absolute addresses on most targets; where it does not they are still
 * offsets from the load base. */
static uintptr_t hc_mem_hooks_dyn_addr(hc_elf_addr_t base, hc_elf_addr_t v)
{
    return v < base ? (uintptr_t)(base + v) : (uintptr_t)v;
}

typedef struct {
    uintptr_t base, ro_lo, ro_hi; /* load base; pages RELRO made read-only */
    const struct dl_phdr_info *info;
    const hc_elf_sym_t *symtab;
    const char *strtab;
    size_t strsz;
} hc_mem_hooks_obj_t;

static bool hc_mem_hooks_in_object(const hc_mem_hooks_obj_t *o, uintptr_t v)
{
    for (int i = 0; i < o->info->dlpi_phnum; i++) {
        const hc_elf_phdr_t *ph = &o->info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD && v - (o->base + ph->p_vaddr) < ph->p_memsz) return true;
    }
    return false;
}

/* Points one slot at our wrapper h. A slot is taken over only when it holds
 * the original we chain to, or the object's own lazy-binding stub for a
 * symbol it does not define (its first call would bind the original). A
 * slot bound elsewhere (RTLD_DEEPBIND, another library's hook, a second
 * allocator) is left alone: calling our original instead would change which
 * function the object runs. */
static void hc_mem_hooks_patch_slot(const hc_mem_hooks_obj_t *o, const hc_elf_sym_t *sym,
                                    void **slot, int h)
{
    void *value = hc_mem_hooks_tab[h].wrapper;
    void *cur = __atomic_load_n(slot, __ATOMIC_RELAXED);
    if (cur == value) return;
    bool lazy_stub = sym->st_shndx == SHN_UNDEF && hc_mem_hooks_in_object(o, (uintptr_t)cur);
    if (cur != hc_mem_hooks.orig[h] && !lazy_stub) {
        hc_mem_hooks.foreign++;
        return;
    }
    uintptr_t page = (uintptr_t)slot & ~(uintptr_t)(hc_mem_hooks.page - 1);
    bool ro = page >= o->ro_lo && page < o->ro_hi;
    if (ro && mprotect((void *)page, hc_mem_hooks.page, PROT_READ | PROT_WRITE) != 0) {
        hc_mem_hooks.mprotect_failures++;
        return;
    }
    __atomic_store_n(slot, value, __ATOMIC_RELEASE);
    if (ro) mprotect((void *)page, hc_mem_hooks.page, PROT_READ);
    hc_mem_hooks.slots++;
}

static void hc_mem_hooks_patch_relocs(const hc_mem_hooks_obj_t *o, const hc_elf_rela_t *rel,
                                      size_t bytes)
{
    for (size_t i = 0; i < bytes / sizeof(*rel); i++) {
        unsigned long type = ELF64_R_TYPE(rel[i].r_info);
        if (type != HC_MEM_R_JUMP_SLOT && type != HC_MEM_R_GLOB_DAT) continue;
        const hc_elf_sym_t *sym = &o->symtab[ELF64_R_SYM(rel[i].r_info)];
        if (sym->st_name == 0 || (o->strsz && sym->st_name >= o->strsz)) continue;
        const char *name = o->strtab + sym->st_name;
        for (int h = 0; h < HC_HOOK_COUNT; h++) {
            if (name[0] != hc_mem_hooks_tab[h].name[0] || strcmp(name, hc_mem_hooks_tab[h].name))
                continue;
            if (hc_mem_hooks.orig[h])
                hc_mem_hooks_patch_slot(o, sym, (void **)(o->base + rel[i].r_offset), h);
            break;
        }
    }
}

static int hc_mem_hooks_patch_object(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    (void)arg;
    if (info->dlpi_name && hc_mem_hooks_skip(info->dlpi_name)) return 0;
    hc_mem_hooks_obj_t o = {.base = (uintptr_t)info->dlpi_addr, .info = info};
    const hc_elf_dyn_t *dyn = NULL;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const hc_elf_phdr_t *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_DYNAMIC) dyn = (const hc_elf_dyn_t *)(o.base + ph->p_vaddr);
        if (ph->p_type == PT_GNU_RELRO) {
            /* ld.so protects the whole pages of the segment only. */
            uintptr_t mask = ~(uintptr_t)(hc_mem_hooks.page - 1);
            o.ro_lo = (o.base + ph->p_vaddr) & mask;
            o.ro_hi = (o.base + ph->p_vaddr + ph->p_memsz) & mask;
        }
    }
    if (!dyn) return 0;
    const hc_elf_rela_t *jmprel = NULL, *rela = NULL;
    size_t jmprel_bytes = 0, rela_bytes = 0;
    bool plt_rela = true;
    for (; dyn->d_tag != DT_NULL; dyn++) {
        switch (dyn->d_tag) {
        case DT_SYMTAB:
            o.symtab = (const void *)hc_mem_hooks_dyn_addr(info->dlpi_addr, dyn->d_un.d_ptr);
            break;
        case DT_STRTAB:
            o.strtab = (const void *)hc_mem_hooks_dyn_addr(info->dlpi_addr, dyn->d_un.d_ptr);
            break;
        case DT_STRSZ:
            o.strsz = dyn->d_un.d_val;
            break;
        case DT_JMPREL:
            jmprel = (const void *)hc_mem_hooks_dyn_addr(info->dlpi_addr, dyn->d_un.d_ptr);
            break;
        case DT_PLTRELSZ:
            jmprel_bytes = dyn->d_un.d_val;
            break;
        case DT_PLTREL:
            plt_rela = dyn->d_un.d_val == DT_RELA;
            break;
        case DT_RELA:
            rela = (const void *)hc_mem_hooks_dyn_addr(info->dlpi_addr, dyn->d_un.d_ptr);
            break;
        case DT_RELASZ:
            rela_bytes = dyn->d_un.d_val;
            break;
        default:
            break;
        }
    }
    if (!o.symtab || !o.strtab) return 0;
    if (jmprel && plt_rela) hc_mem_hooks_patch_relocs(&o, jmprel, jmprel_bytes);
    if (rela) hc_mem_hooks_patch_relocs(&o, rela, rela_bytes);
    return 0;
}

static int hc_mem_hooks_adds_cb(struct dl_phdr_info *info, size_t size, void *arg)
{
    if (size >= offsetof(struct dl_phdr_info, dlpi_adds) + sizeof(info->dlpi_adds))
        *(unsigned long long *)arg = info->dlpi_adds;
    return 1; /* the first object is enough: the counters are global */
}

static unsigned long long hc_mem_hooks_adds(void)
{
    unsigned long long adds = 0;
    dl_iterate_phdr(hc_mem_hooks_adds_cb, &adds);
    return adds;
}

/* One walk over every loaded object (hc_mem_hooks.lock held). */
static void hc_mem_hooks_walk_locked(void)
{
    unsigned before = hc_mem_hooks.slots, foreign = hc_mem_hooks.foreign;
    unsigned long long adds = hc_mem_hooks_adds();
    dl_iterate_phdr(hc_mem_hooks_patch_object, NULL);
    __atomic_store_n(&hc_mem_hooks.adds, adds, __ATOMIC_RELEASE);
    hc_log_debug("mem: memory hooks: %u GOT slots patched (%u in all), %u bound elsewhere left "
                 "alone%s",
                 hc_mem_hooks.slots - before, hc_mem_hooks.slots, hc_mem_hooks.foreign - foreign,
                 hc_mem_hooks.mprotect_failures ? ", some RELRO pages could not be unprotected"
                                                : "");
}

/* The originals, and which allocator free belongs to. */
static void hc_mem_hooks_resolve_locked(void)
{
    hc_mem_hooks.page = (size_t)sysconf(_SC_PAGESIZE);
    for (int h = 0; h < HC_HOOK_COUNT; h++) {
        void *fn = dlsym(RTLD_DEFAULT, hc_mem_hooks_tab[h].name);
        if (fn == hc_mem_hooks_tab[h].wrapper) fn = NULL;
        __atomic_store_n(&hc_mem_hooks.orig[h], fn, __ATOMIC_RELEASE);
    }
    Dl_info di;
    void *f = hc_mem_hooks.orig[HC_HOOK_FREE];
    const char *lib = f && dladdr(f, &di) && di.dli_fname ? strrchr(di.dli_fname, '/') : NULL;
    hc_mem_hooks.glibc_malloc = lib && !strncmp(lib + 1, "libc.so.6", 9);
    if (!hc_mem_hooks.glibc_malloc)
        hc_mem_hooks.usable = (hc_usable_fn)dlsym(RTLD_DEFAULT, "malloc_usable_size");
    hc_log_debug("mem: memory hooks: free is %s's%s", lib ? lib + 1 : "an unknown object",
                 hc_mem_hooks.glibc_malloc ? " (glibc chunk headers)"
                 : hc_mem_hooks.usable     ? " (sizes from malloc_usable_size)"
                                           : " (no size: heap frees are not followed)");
}

hcomm_status_t hc_mem_hooks_install(void)
{
    pthread_mutex_lock(&hc_mem_hooks.lock);
    if (!hc_mem_hooks.installed) {
        /* Other objects' GOT slots will point into this one: it must never
         * be unloaded (a dlclose of libhcomm would leave them dangling). */
        Dl_info self;
        if (dladdr((void *)hc_mem_hooks_install, &self) && self.dli_fname)
            dlopen(self.dli_fname, RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE);
        dlerror(); /* the executable is not found by name: no error to leave behind */
        hc_mem_hooks_resolve_locked();
        hc_mem_hooks_walk_locked();
        __atomic_store_n(&hc_mem_hooks.installed, true, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&hc_mem_hooks.lock);
    return HCOMM_OK;
}

void hc_mem_hooks_refresh(void)
{
    if (!__atomic_load_n(&hc_mem_hooks.installed, __ATOMIC_ACQUIRE)) return;
    if (hc_mem_hooks_adds() == __atomic_load_n(&hc_mem_hooks.adds, __ATOMIC_ACQUIRE)) return;
    pthread_mutex_lock(&hc_mem_hooks.lock);
    if (hc_mem_hooks_adds() != hc_mem_hooks.adds) hc_mem_hooks_walk_locked();
    pthread_mutex_unlock(&hc_mem_hooks.lock);
}

unsigned hc_mem_hooks_slots(void)
{
    pthread_mutex_lock(&hc_mem_hooks.lock);
    unsigned n = hc_mem_hooks.slots;
    pthread_mutex_unlock(&hc_mem_hooks.lock);
    return n;
}

#else /* no known relocation types: the cache relies on hcomm_mem_deregister */

hcomm_status_t hc_mem_hooks_install(void)
{
    return hc_error(HCOMM_ERR_UNSUPPORTED,
                    "mem: memory hooks: GOT patching is not implemented for this architecture");
}

void hc_mem_hooks_refresh(void) {}

unsigned hc_mem_hooks_slots(void)
{
    return 0;
}

#endif
