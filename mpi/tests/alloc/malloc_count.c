/* Counts the calls to malloc, calloc, realloc and the aligned allocators
 * of a process, all threads together (loaded with LD_PRELOAD), for
 * tandem's zero-allocation check: alloc_count() reads the count. A plain
 * global, not thread-local: the first touch of a preloaded library's
 * thread-local variable may itself allocate. */
#define _GNU_SOURCE
#include <stddef.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static long total;

void *malloc(size_t n) { __atomic_add_fetch(&total, 1, __ATOMIC_RELAXED); return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { __atomic_add_fetch(&total, 1, __ATOMIC_RELAXED); return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { __atomic_add_fetch(&total, 1, __ATOMIC_RELAXED); return __libc_realloc(p, n); }
void *memalign(size_t a, size_t n) { __atomic_add_fetch(&total, 1, __ATOMIC_RELAXED); return __libc_memalign(a, n); }
int posix_memalign(void **p, size_t a, size_t n) {
    __atomic_add_fetch(&total, 1, __ATOMIC_RELAXED);
   
    *p = __libc_memalign(a, n);
    return *p ? 0 : 12;
}
void *aligned_alloc(size_t a, size_t n) { return memalign(a, n); }

/* Allocations made so far (every thread). */
long alloc_count(void) { return __atomic_load_n(&total, __ATOMIC_RELAXED); }
