//! The structure behind `SuffixIndex`: a suffix tree of the held sequences, cut at a fixed depth,
//! that counts on every node how many held positions start a path through it.
//!
//! Each held position inserts the path of its next tokens (to the depth limit or the end of its
//! sequence). Edges are runs of tokens read from the held tokens themselves, so a node exists only
//! where paths branch or end and the tree has at most two nodes per held position, whatever the
//! repetition. Removing a position walks its path back down, decrementing counts.

use std::collections::VecDeque;

use super::nodes::{Node, Nodes, NONE, ROOT};

/// The held tokens back to back, addressed by a position that only grows (a sequence's tokens
/// keep their positions until it is evicted, so nodes can point into them).
#[derive(Default)]
pub(super) struct Tokens {
    buf: VecDeque<u32>,
    /// Position of `buf[0]`.
    base: u64,
}

impl Tokens {
    fn at(&self, position: u64) -> u32 {
        self.buf[(position - self.base) as usize]
    }

    /// Position the next pushed token gets.
    pub(super) fn end(&self) -> u64 {
        self.base + self.buf.len() as u64
    }

    pub(super) fn push(&mut self, token_ids: &[u32]) {
        self.buf.extend(token_ids);
    }

    pub(super) fn drop_front(&mut self, n: usize) {
        self.buf.drain(..n);
        self.base += n as u64;
    }
}

/// A point in the tree, `depth` tokens from the root on the edge into `node` (at its end when
/// `depth` is the node's).
#[derive(Clone, Copy, Debug)]
pub(super) struct Cursor {
    node: u32,
    depth: u32,
}

/// The most frequent token after a cursor.
pub(super) struct Step {
    pub token: u32,
    /// Occurrences at the cursor that go on with `token`, and all occurrences at the cursor.
    pub count: u32,
    pub total: u32,
    pub next: Cursor,
}

pub(super) struct SuffixTree {
    nodes: Nodes,
}

impl SuffixTree {
    /// Drafts will step from cursors at least `lead_depth` deep.
    pub(super) fn new(lead_depth: u32) -> Self {
        Self { nodes: Nodes::new(lead_depth) }
    }

    /// Nodes in use, the root included.
    #[cfg(test)]
    pub(super) fn node_count(&self) -> usize {
        self.nodes.len().0
    }

    /// Checks that counts only fall going down, that every node but the root branches or ends a
    /// path (else it should have been merged away), that leaders lead, and that nothing leaks.
    #[cfg(test)]
    pub(super) fn assert_compact(&self) {
        let (mut reachable, mut stack) = (0, vec![ROOT]);
        while let Some(id) = stack.pop() {
            reachable += 1;
            let node = &self.nodes[id];
            let (mut children, mut passing) = (0, 0);
            for child in self.nodes.children(id) {
                let below = &self.nodes[child];
                assert!(below.depth > node.depth && self.nodes.child(id, below.token) == Some(child));
                assert!(node.depth < self.nodes.lead_depth() || self.nodes.rank(child) <= self.nodes.rank(node.heavy));
                (children, passing) = (children + 1, passing + below.count);
                stack.push(child);
            }
            assert!(passing <= node.count);
            assert!(node.depth < self.nodes.lead_depth() || (node.heavy == NONE) == (children == 0));
            assert!(id == ROOT || node.count > 0 && (children != 1 || passing < node.count), "node {id}");
        }
        assert_eq!(self.nodes.len(), (reachable, reachable - 1));
    }

    /// Adds the path of the `len` tokens held from `start`.
    pub(super) fn insert(&mut self, tokens: &Tokens, start: u64, len: u32) {
        self.nodes[ROOT].count += 1;
        let (mut parent, mut depth) = (ROOT, 0);
        loop {
            let token = tokens.at(start + u64::from(depth));
            let Some(child) = self.nodes.child(parent, token) else {
                let leaf = self.nodes.alloc(Node::new(token, len, start));
                self.nodes.link(parent, leaf);
                return;
            };
            let Node { depth: child_depth, newest: reference, .. } = self.nodes[child];
            let mut common = depth + 1;
            let comparable = child_depth.min(len);
            while common < comparable
                && tokens.at(reference + u64::from(common)) == tokens.at(start + u64::from(common))
            {
                common += 1;
            }
            if common == child_depth {
                self.nodes[child].count += 1;
                self.nodes[child].newest = start;
                self.nodes.promote(parent, child);
                if common == len {
                    return;
                }
                (parent, depth) = (child, common);
                continue;
            }
            // The path leaves the edge, or ends, inside it: a node there holds both.
            let count = self.nodes[child].count + 1;
            let split = self.nodes.alloc(Node::new(token, common, start));
            self.nodes[split].count = count;
            self.nodes.replace(parent, child, split);
            self.nodes.promote(parent, split);
            self.nodes[child].token = tokens.at(reference + u64::from(common));
            self.nodes.link(split, child);
            if common < len {
                let leaf = self.nodes.alloc(Node::new(tokens.at(start + u64::from(common)), len, start));
                self.nodes.link(split, leaf);
            }
            return;
        }
    }

    /// Takes out the path `insert` added for the same arguments; the tokens must still be held.
    pub(super) fn remove(&mut self, tokens: &Tokens, start: u64, len: u32) {
        self.nodes[ROOT].count -= 1;
        let (mut grandparent, mut parent, mut depth) = (ROOT, ROOT, 0);
        let (above, deepest) = loop {
            let token = tokens.at(start + u64::from(depth));
            let child = self.nodes.child(parent, token).expect("every held position's path is in the tree");
            self.nodes[child].count -= 1;
            if self.nodes[child].count == 0 {
                // Only this path went through it: the subtree is this path's tail.
                self.nodes.unlink(parent, child);
                self.nodes.release_subtree(child);
                break (grandparent, parent);
            }
            if self.nodes[parent].heavy == child {
                self.nodes.elect_heavy(parent);
            }
            let reached = self.nodes[child].depth;
            if reached >= len {
                debug_assert_eq!(reached, len, "a path ends at a node");
                break (parent, child);
            }
            (grandparent, parent, depth) = (parent, child, reached);
        };
        // Only the deepest surviving node of the path can have lost its reason to exist (a
        // branch or an end): kept, the tree would grow a node per position ever seen there.
        self.merge_into_only_child(above, deepest);
    }

    /// Folds `node` into its child when it has one child and no path ends at it.
    fn merge_into_only_child(&mut self, parent: u32, node: u32) {
        let Node { count, token, first_child: only, .. } = self.nodes[node];
        if node == ROOT || only == NONE || self.nodes.children(node).nth(1).is_some() || self.nodes[only].count != count
        {
            return;
        }
        self.nodes.unlink(node, only);
        self.nodes[only].token = token;
        self.nodes.replace(parent, node, only);
        self.nodes.release(node);
    }

    /// Where `pattern` leads from the root, if some held path spells it.
    pub(super) fn locate(&self, tokens: &Tokens, pattern: &[u32]) -> Option<Cursor> {
        let mut cursor = Cursor { node: ROOT, depth: 0 };
        while (cursor.depth as usize) < pattern.len() {
            let node = self.nodes.child(cursor.node, pattern[cursor.depth as usize])?;
            let Node { depth: edge_end, newest: reference, .. } = self.nodes[node];
            let end = (edge_end as usize).min(pattern.len());
            let mut depth = cursor.depth as usize + 1;
            while depth < end {
                if tokens.at(reference + depth as u64) != pattern[depth] {
                    return None;
                }
                depth += 1;
            }
            cursor = Cursor { node, depth: depth as u32 };
        }
        Some(cursor)
    }

    /// Whether some held path goes on past `cursor`.
    pub(super) fn continues(&self, cursor: Cursor) -> bool {
        let node = &self.nodes[cursor.node];
        cursor.depth < node.depth || node.first_child != NONE
    }

    /// The token most held paths take after `cursor` (the newest on a tie); `None` where all end.
    pub(super) fn step(&self, tokens: &Tokens, cursor: Cursor) -> Option<Step> {
        let node = &self.nodes[cursor.node];
        let depth = cursor.depth + 1;
        if cursor.depth < node.depth {
            // Inside an edge every path goes on the same way.
            let token = tokens.at(node.newest + u64::from(cursor.depth));
            let next = Cursor { node: cursor.node, depth };
            return Some(Step { token, count: node.count, total: node.count, next });
        }
        debug_assert!(node.depth >= self.nodes.lead_depth(), "no leader is kept at depth {}", node.depth);
        if node.heavy == NONE {
            return None;
        }
        let best = &self.nodes[node.heavy];
        Some(Step { token: best.token, count: best.count, total: node.count, next: Cursor { node: node.heavy, depth } })
    }
}
