/*
 * Pool memory read and written in place by other local ranks (the zero-copy
 * collectives): a region's memfd is described by (fd, inode, size) and a
 * peer maps it through /proc/PID/fd, which needs the same permission as
 * reading that process's memory. The inode check refuses a stale descriptor
 * whose fd number was reused for another file.
 */
#include "mem/mem.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

bool hc_mem_share_describe(const void *buf, size_t len, int32_t *fd_p, uint64_t *ino_p,
                           uint64_t *off_p, uint64_t *size_p)
{
    size_t off;
    hc_mem_region_t *r = hc_mem_region_lookup(buf, len, &off);
    struct stat st;
    if (!r || r->fd < 0 || !(r->flags & HC_MEM_SHARED) || fstat(r->fd, &st) != 0)
        return false;
    *fd_p = r->fd;
    *ino_p = (uint64_t)st.st_ino;
    *off_p = off;
    *size_p = r->size;
    return true;
}

void *hc_mem_share_map(uint32_t pid, int32_t fd, uint64_t ino, uint64_t size)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%u/fd/%d", pid, fd);
    int mfd = open(path, O_RDWR | O_CLOEXEC);
    if (mfd < 0)
        return NULL;
    struct stat st;
    void *base = MAP_FAILED;
    if (fstat(mfd, &st) == 0 && (uint64_t)st.st_ino == ino && (uint64_t)st.st_size >= size)
        base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
    close(mfd);
    return base == MAP_FAILED ? NULL : base;
}

void hc_mem_share_unmap(void *base, uint64_t size)
{
    if (base)
        munmap(base, size);
}
