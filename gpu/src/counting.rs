//! A global allocator that counts each thread's allocations, for the
//! zero-allocation checks (the library's tests and `tandem-gpu-check`
//! include this file; the library itself never installs it). The count
//! is a const-initialised thread local: reading it inside the allocator
//! never allocates.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static MINE: Cell<u64> = const { Cell::new(0) };
}

/// Allocations this thread made so far.
pub fn mine() -> u64 {
    MINE.with(Cell::get)
}

// SAFETY: forwards to the system allocator under the same contract,
// counting on the side.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = MINE.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        let _ = MINE.try_with(|c| c.set(c.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;
