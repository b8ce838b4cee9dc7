//! Free blocks in eviction order: an intrusive doubly linked list over block ids.
//!
//! A prefix-cache hit must pull a free block out of the middle of the queue (a
//! "touch"), so removal has to be O(1), which a `VecDeque` cannot do.

use crate::block::BlockId;

#[derive(Debug)]
pub(crate) struct FreeQueue {
    head: Option<BlockId>,
    tail: Option<BlockId>,
    prev: Vec<Option<BlockId>>,
    next: Vec<Option<BlockId>>,
    queued: Vec<bool>,
    len: usize,
}

impl FreeQueue {
    /// A queue holding every block id `0..num_blocks`, lowest first.
    pub(crate) fn with_all(num_blocks: usize) -> Self {
        let mut queue = Self {
            head: None,
            tail: None,
            prev: vec![None; num_blocks],
            next: vec![None; num_blocks],
            queued: vec![false; num_blocks],
            len: 0,
        };
        for id in 0..num_blocks {
            queue.push_back(id as BlockId);
        }
        queue
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn contains(&self, id: BlockId) -> bool {
        self.queued.get(id as usize).copied().unwrap_or(false)
    }

    /// Returns false (and changes nothing) for an unknown or already queued id.
    pub(crate) fn push_back(&mut self, id: BlockId) -> bool {
        let i = id as usize;
        if i >= self.queued.len() || self.queued[i] {
            return false;
        }
        self.prev[i] = self.tail;
        self.next[i] = None;
        match self.tail {
            Some(t) => self.next[t as usize] = Some(id),
            None => self.head = Some(id),
        }
        self.tail = Some(id);
        self.queued[i] = true;
        self.len += 1;
        true
    }

    /// Returns false (and changes nothing) for an unknown or already queued id.
    pub(crate) fn push_front(&mut self, id: BlockId) -> bool {
        let i = id as usize;
        if i >= self.queued.len() || self.queued[i] {
            return false;
        }
        self.prev[i] = None;
        self.next[i] = self.head;
        match self.head {
            Some(h) => self.prev[h as usize] = Some(id),
            None => self.tail = Some(id),
        }
        self.head = Some(id);
        self.queued[i] = true;
        self.len += 1;
        true
    }

    pub(crate) fn pop_front(&mut self) -> Option<BlockId> {
        let id = self.head?;
        self.remove(id);
        Some(id)
    }

    /// Unlinks `id`; returns false if it was not queued.
    pub(crate) fn remove(&mut self, id: BlockId) -> bool {
        if !self.contains(id) {
            return false;
        }
        let i = id as usize;
        let (prev, next) = (self.prev[i], self.next[i]);
        match prev {
            Some(p) => self.next[p as usize] = next,
            None => self.head = next,
        }
        match next {
            Some(n) => self.prev[n as usize] = prev,
            None => self.tail = prev,
        }
        self.prev[i] = None;
        self.next[i] = None;
        self.queued[i] = false;
        self.len -= 1;
        true
    }

    /// Front (next to be evicted) to back.
    pub(crate) fn iter(&self) -> impl Iterator<Item = BlockId> + '_ {
        std::iter::successors(self.head, move |&id| self.next[id as usize]).take(self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_pop_remove_keep_order() {
        let mut q = FreeQueue::with_all(4);
        assert_eq!(q.iter().collect::<Vec<_>>(), vec![0, 1, 2, 3]);
        assert!(q.remove(2));
        assert!(!q.remove(2));
        assert_eq!(q.pop_front(), Some(0));
        assert!(q.push_back(0));
        assert!(!q.push_back(0));
        assert!(!q.push_back(9));
        assert_eq!(q.iter().collect::<Vec<_>>(), vec![1, 3, 0]);
        assert!(q.remove(0));
        assert!(q.remove(1));
        assert_eq!(q.pop_front(), Some(3));
        assert_eq!(q.pop_front(), None);
        assert_eq!(q.len(), 0);
        assert!(q.push_back(2));
        assert_eq!(q.iter().collect::<Vec<_>>(), vec![2]);
        assert!(q.push_front(1) && !q.push_front(1) && !q.push_front(9));
        assert!(q.push_back(3) && q.push_front(0));
        assert_eq!(q.iter().collect::<Vec<_>>(), vec![0, 1, 2, 3]);
        assert!(q.remove(0) && q.remove(3));
        assert_eq!((q.pop_front(), q.pop_front(), q.pop_front()), (Some(1), Some(2), None));
    }
}
