//! The CUDA IPC handle caches of ranks on one host.
//!
//! Exporting (`cuIpcGetMemHandle`) and opening (`cuIpcOpenMemHandle`) cost
//! tens of microseconds, so each is done once per allocation: the owner
//! gives every exported allocation an id, the peer keeps what it opened
//! under (owner, id). When the owner frees the allocation, the id retires
//! and the peer is told to close its mapping. The trap this guards
//! against: a new allocation at the address of a freed one. Keyed by
//! address alone, a peer would go on writing through the old mapping; by
//! id, the new allocation is a new export and is opened anew.

/// The owner's side: which of its allocations were exported, under which
/// ids.
#[derive(Debug, Default)]
pub struct Exports {
    next: u64,
    live: Vec<(u64, usize, u64)>,
}

impl Exports {
    /// The id of the allocation at `base` of `len` bytes, exporting it
    /// (`true`: new, its handle must be made and sent) or finding it.
    pub fn export(&mut self, base: u64, len: usize) -> (u64, bool) {
        if let Some(&(_, _, id)) = self.live.iter().find(|(b, l, _)| *b == base && *l == len) {
            return (id, false);
        }
        self.next += 1;
        self.live.push((base, len, self.next));
        (self.next, true)
    }

    /// The allocation at `base` was freed: the id its peers must close, if
    /// it was exported.
    pub fn freed(&mut self, base: u64) -> Option<u64> {
        let at = self.live.iter().position(|(b, _, _)| *b == base)?;
        Some(self.live.swap_remove(at).2)
    }
}

/// The peer's side: what it opened, by owner and id, at most `cap`
/// mappings (the least recently used is closed first).
#[derive(Debug)]
pub struct Opened<M> {
    cap: usize,
    clock: u64,
    entries: Vec<Entry<M>>,
}

#[derive(Debug)]
struct Entry<M> {
    owner: usize,
    id: u64,
    mapped: M,
    used: u64,
}

impl<M> Opened<M> {
    /// An empty cache of at most `cap` mappings (at least one).
    pub fn new(cap: usize) -> Self {
        Self {
            cap: cap.max(1),
            clock: 0,
            entries: Vec::new(),
        }
    }

    /// The mapping of `owner`'s allocation `id`, opening it with `open` the
    /// first time; `close` gets the mapping evicted to make room, if any.
    ///
    /// # Errors
    /// What `open` returns; nothing is cached then.
    pub fn get_or_open<E>(
        &mut self,
        owner: usize,
        id: u64,
        open: impl FnOnce() -> Result<M, E>,
        close: impl FnOnce(M),
    ) -> Result<&M, E> {
        self.clock += 1;
        let now = self.clock;
        if let Some(i) = self
            .entries
            .iter()
            .position(|e| e.owner == owner && e.id == id)
        {
            self.entries[i].used = now;
            return Ok(&self.entries[i].mapped);
        }
        let mapped = open()?;
        if self.entries.len() == self.cap {
            let lru = (0..self.entries.len())
                .min_by_key(|&i| self.entries[i].used)
                .expect("a full cache has entries");
            close(self.entries.swap_remove(lru).mapped);
        }
        self.entries.push(Entry {
            owner,
            id,
            mapped,
            used: now,
        });
        Ok(&self.entries.last().expect("just pushed").mapped)
    }

    /// `owner` freed allocation `id`: its mapping, to close, if open.
    pub fn invalidate(&mut self, owner: usize, id: u64) -> Option<M> {
        let i = self
            .entries
            .iter()
            .position(|e| e.owner == owner && e.id == id)?;
        Some(self.entries.swap_remove(i).mapped)
    }

    /// `owner` is gone: every mapping of its allocations, to close.
    pub fn forget(&mut self, owner: usize) -> Vec<M> {
        let (gone, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.entries)
            .into_iter()
            .partition(|e| e.owner == owner);
        self.entries = keep;
        gone.into_iter().map(|e| e.mapped).collect()
    }

    /// Mappings open.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether none is open.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_buffer_is_exported_and_opened_once() {
        let mut ex = Exports::default();
        let (id, new) = ex.export(0x7000, 4096);
        assert!(new);
        assert_eq!(ex.export(0x7000, 4096), (id, false));
        let mut op = Opened::<u64>::new(4);
        let mut opens = 0;
        for _ in 0..3 {
            let m = op
                .get_or_open::<()>(
                    1,
                    id,
                    || {
                        opens += 1;
                        Ok(0xd000)
                    },
                    |_| panic!("nothing to evict"),
                )
                .unwrap();
            assert_eq!(*m, 0xd000);
        }
        assert_eq!(opens, 1);
    }

    #[test]
    fn a_new_allocation_at_a_freed_address_is_not_the_old_mapping() {
        let mut ex = Exports::default();
        let mut op = Opened::<&str>::new(4);
        let (old, _) = ex.export(0x7000, 4096);
        op.get_or_open::<()>(1, old, || Ok("old mapping"), |_| {})
            .unwrap();
        // Freed: the peer is told, and closes.
        assert_eq!(ex.freed(0x7000), Some(old));
        assert_eq!(op.invalidate(1, old), Some("old mapping"));
        assert_eq!(ex.freed(0x7000), None, "freed once");
        // The allocator hands out the same address again.
        let (new, fresh) = ex.export(0x7000, 4096);
        assert!(fresh && new != old);
        let m = op
            .get_or_open::<()>(1, new, || Ok("new mapping"), |_| {})
            .unwrap();
        assert_eq!(*m, "new mapping");
    }

    #[test]
    fn the_least_recently_used_is_closed_for_room_and_a_failed_open_caches_nothing() {
        let mut op = Opened::<u32>::new(2);
        let mut closed = Vec::new();
        op.get_or_open::<()>(1, 1, || Ok(10), |m| closed.push(m))
            .unwrap();
        op.get_or_open::<()>(1, 2, || Ok(20), |m| closed.push(m))
            .unwrap();
        op.get_or_open::<()>(1, 1, || Ok(99), |m| closed.push(m))
            .unwrap();
        op.get_or_open::<()>(2, 1, || Ok(30), |m| closed.push(m))
            .unwrap();
        assert_eq!(closed, vec![20], "id 2 was used least recently");
        assert!(op.get_or_open(3, 1, || Err("no"), |_| {}).is_err());
        assert_eq!(op.len(), 2);
        let mut gone = op.forget(1);
        gone.sort_unstable();
        assert_eq!(gone, vec![10]);
        assert_eq!(op.len(), 1);
    }
}
