//! The suffix tree's nodes: an arena with reused slots, a hash table from a node and a token to
//! the child under it, each node's children as a linked list (eviction must find and unlink
//! them), and each node's most frequent child kept current.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::ops::{Index, IndexMut};

pub(super) const ROOT: u32 = 0;
pub(super) const NONE: u32 = u32::MAX;

#[derive(Clone, Copy)]
pub(super) struct Node {
    /// Held positions whose path passes through the node's end.
    pub count: u32,
    /// Length of the node's path; its edge spans the depths after its parent's.
    pub depth: u32,
    /// First token of the edge: the node's key under its parent.
    pub token: u32,
    /// Start of the newest position whose path passes through: the edge is read there, it stays
    /// held as long as the node (eviction takes the oldest first), and it breaks ties in favour of
    /// what was seen last.
    pub newest: u64,
    /// The child most paths take, the newest on a tie, so that a draft follows it without a scan
    /// of the children (thousands after a common bigram).
    pub heavy: u32,
    pub first_child: u32,
    next_sibling: u32,
    prev_sibling: u32,
}

impl Node {
    pub(super) fn new(token: u32, depth: u32, newest: u64) -> Self {
        Self { count: 1, depth, token, newest, heavy: NONE, first_child: NONE, next_sibling: NONE, prev_sibling: NONE }
    }
}

pub(super) struct Nodes {
    nodes: Vec<Node>,
    /// Slots of released nodes, reused first.
    free: Vec<u32>,
    /// `(parent << 32) | token` to child: the lookup a walk makes at every node.
    edges: HashMap<u64, u32, BuildHasherDefault<EdgeHasher>>,
    /// Shallowest node whose leading child is kept: drafts step from no shallower. The root and
    /// the nodes under it have the most children, which would be rescanned on most evictions.
    lead_depth: u32,
}

fn edge(parent: u32, token: u32) -> u64 {
    (u64::from(parent) << 32) | u64::from(token)
}

impl Index<u32> for Nodes {
    type Output = Node;
    fn index(&self, id: u32) -> &Node {
        &self.nodes[id as usize]
    }
}

impl IndexMut<u32> for Nodes {
    fn index_mut(&mut self, id: u32) -> &mut Node {
        &mut self.nodes[id as usize]
    }
}

impl Nodes {
    pub(super) fn new(lead_depth: u32) -> Self {
        let root = Node { count: 0, ..Node::new(NONE, 0, 0) };
        Self { nodes: vec![root], free: Vec::new(), edges: HashMap::default(), lead_depth }
    }

    /// Nodes in use, the root included, and edges.
    #[cfg(test)]
    pub(super) fn len(&self) -> (usize, usize) {
        (self.nodes.len() - self.free.len(), self.edges.len())
    }

    pub(super) fn lead_depth(&self) -> u32 {
        self.lead_depth
    }

    pub(super) fn child(&self, parent: u32, token: u32) -> Option<u32> {
        self.edges.get(&edge(parent, token)).copied()
    }

    pub(super) fn children(&self, parent: u32) -> impl Iterator<Item = u32> + '_ {
        let first = Some(self[parent].first_child).filter(|&c| c != NONE);
        std::iter::successors(first, |&c| Some(self[c].next_sibling).filter(|&n| n != NONE))
    }

    /// What the leading child is chosen by: paths taken, then recency.
    pub(super) fn rank(&self, id: u32) -> (u32, u64) {
        (self[id].count, self[id].newest)
    }

    pub(super) fn alloc(&mut self, node: Node) -> u32 {
        match self.free.pop() {
            Some(id) => {
                self[id] = node;
                id
            }
            None => {
                self.nodes.push(node);
                u32::try_from(self.nodes.len() - 1).expect("fewer than 2^32 nodes")
            }
        }
    }

    /// Frees one node, already unlinked and without children.
    pub(super) fn release(&mut self, id: u32) {
        self.free.push(id);
    }

    /// Frees a node, already unlinked, and everything under it.
    pub(super) fn release_subtree(&mut self, top: u32) {
        let mut stack = vec![top];
        while let Some(id) = stack.pop() {
            let mut child = self[id].first_child;
            while child != NONE {
                self.edges.remove(&edge(id, self[child].token));
                stack.push(child);
                child = self[child].next_sibling;
            }
            self.free.push(id);
        }
    }

    pub(super) fn link(&mut self, parent: u32, child: u32) {
        let first = self[parent].first_child;
        self.edges.insert(edge(parent, self[child].token), child);
        (self[child].prev_sibling, self[child].next_sibling) = (NONE, first);
        if first != NONE {
            self[first].prev_sibling = child;
        }
        self[parent].first_child = child;
        self.promote(parent, child);
    }

    pub(super) fn unlink(&mut self, parent: u32, child: u32) {
        let Node { token, prev_sibling, next_sibling, .. } = self[child];
        self.edges.remove(&edge(parent, token));
        if prev_sibling == NONE {
            self[parent].first_child = next_sibling;
        } else {
            self[prev_sibling].next_sibling = next_sibling;
        }
        if next_sibling != NONE {
            self[next_sibling].prev_sibling = prev_sibling;
        }
        if self[parent].heavy == child {
            self.elect_heavy(parent);
        }
    }

    /// Puts `new` where `old` is under `parent`, under the same key (`new.token` must be it).
    pub(super) fn replace(&mut self, parent: u32, old: u32, new: u32) {
        let Node { token, prev_sibling, next_sibling, .. } = self[old];
        debug_assert_eq!(self[new].token, token);
        self.edges.insert(edge(parent, token), new);
        if self[parent].heavy == old {
            self[parent].heavy = new;
        }
        (self[new].prev_sibling, self[new].next_sibling) = (prev_sibling, next_sibling);
        if prev_sibling == NONE {
            self[parent].first_child = new;
        } else {
            self[prev_sibling].next_sibling = new;
        }
        if next_sibling != NONE {
            self[next_sibling].prev_sibling = new;
        }
    }

    /// After `child` gained a path (which is then its newest): it may now lead.
    pub(super) fn promote(&mut self, parent: u32, child: u32) {
        let Node { heavy, depth, .. } = self[parent];
        if depth >= self.lead_depth && (heavy == NONE || self.rank(child) > self.rank(heavy)) {
            self[parent].heavy = child;
        }
    }

    /// After the leading child lost a path: a scan, but only on eviction, and only where the
    /// evicted path went through the leader.
    pub(super) fn elect_heavy(&mut self, parent: u32) {
        self[parent].heavy = self.children(parent).max_by_key(|&c| self.rank(c)).unwrap_or(NONE);
    }
}

/// Keys pack two small integers (a node id and a token); one multiply and fold spreads them over
/// all 64 bits, which is all the table needs and far cheaper than SipHash on the hot walk.
#[derive(Default)]
pub(super) struct EdgeHasher(u64);

impl Hasher for EdgeHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u64(self.0 ^ u64::from(byte));
        }
    }

    fn write_u64(&mut self, key: u64) {
        let mixed = (key ^ (key >> 32)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = mixed ^ (mixed >> 29);
    }
}
