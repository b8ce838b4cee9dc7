//! How a model's layers share KV pages (vLLM's hybrid KV cache groups).
//!
//! Layers are partitioned into groups of one attention kind (full, or a sliding window of `w`
//! keys) and equal size. A sequence holds one block table per group; a page (one block of one
//! group) holds the K/V of one block of positions for each layer of its group. Because every
//! group has the same number of layers, every page has the same size and all groups share one
//! pool: the `i`-th layer of every group stores into the same per-slot tensor
//! (`KvCache::layer`), at the page its group's block table names. A windowed group's table gives
//! back the pages that left its window, which is where a sliding-window model's memory goes
//! back (Gemma 3 keeps 5 of every 6 layers local).

use crate::config::ModelConfig;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KvGroups {
    /// The window of each group's layers; `None` attends to every key.
    windows: Vec<Option<usize>>,
    /// Per layer: its group and its position in the group (the tensor it stores into).
    layer_group: Vec<usize>,
    layer_slot: Vec<usize>,
    group_size: usize,
}

impl KvGroups {
    /// One group of every layer for a model without windows. With windows, the group size is
    /// the smaller kind's layer count, and each kind's layers are cut, in order, into groups of
    /// that size; a kind whose count does not divide evenly leaves its last group short (a few
    /// layers' memory is cheaper than a second pool to balance). Full-attention groups first.
    pub fn for_model(config: &ModelConfig) -> Self {
        let windows: Vec<Option<usize>> = (0..config.num_layers).map(|l| config.layer_window(l)).collect();
        Self::from_layer_windows(&windows)
    }

    /// The groups of layers whose windows are `windows_of` (`None`: full attention).
    pub fn from_layer_windows(windows_of: &[Option<usize>]) -> Self {
        let num_layers = windows_of.len();
        let mut kinds: Vec<Option<usize>> = windows_of.to_vec();
        kinds.sort_unstable();
        kinds.dedup();
        let layers_of =
            |kind: Option<usize>| -> Vec<usize> { (0..num_layers).filter(|&l| windows_of[l] == kind).collect() };
        let group_size = kinds.iter().map(|&k| layers_of(k).len()).min().unwrap_or(0).max(1);
        let mut windows = Vec::new();
        let mut layer_group = vec![0; num_layers];
        let mut layer_slot = vec![0; num_layers];
        for &kind in &kinds {
            for chunk in layers_of(kind).chunks(group_size) {
                for (slot, &l) in chunk.iter().enumerate() {
                    layer_group[l] = windows.len();
                    layer_slot[l] = slot;
                }
                windows.push(kind);
            }
        }
        if windows.is_empty() {
            windows.push(None);
        }
        Self { windows, layer_group, layer_slot, group_size }
    }

    pub fn num_groups(&self) -> usize {
        self.windows.len()
    }

    /// Window of each group (`None`: full attention), in group order: what the scheduler
    /// needs to keep one block table per group.
    pub fn windows(&self) -> &[Option<usize>] {
        &self.windows
    }

    /// Layers per group: how many layers one page holds.
    pub fn group_size(&self) -> usize {
        self.group_size
    }

    pub fn group_of(&self, layer: usize) -> usize {
        self.layer_group[layer]
    }

    /// Which of the cache's per-slot tensors layer `layer` stores into.
    pub fn slot_of(&self, layer: usize) -> usize {
        self.layer_slot[layer]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups_of(num_layers: usize, windowed: Option<Vec<bool>>) -> KvGroups {
        let windows: Vec<Option<usize>> = match windowed {
            Some(windowed) => windowed.iter().map(|&w| w.then_some(8)).collect(),
            None => vec![None; num_layers],
        };
        KvGroups::from_layer_windows(&windows)
    }

    #[test]
    fn a_model_without_windows_is_one_group_of_every_layer() {
        let g = groups_of(4, None);
        assert_eq!((g.num_groups(), g.group_size()), (1, 4));
        assert_eq!((0..4).map(|l| g.slot_of(l)).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    }

    #[test]
    fn gemma3s_pattern_is_one_full_group_and_five_windowed() {
        // Gemma 3 270M: 18 layers, every sixth global.
        let windowed: Vec<bool> = (0..18).map(|l| l % 6 != 5).collect();
        let g = groups_of(18, Some(windowed.clone()));
        assert_eq!(g.group_size(), 3);
        assert_eq!(g.windows(), &[None, Some(8), Some(8), Some(8), Some(8), Some(8)]);
        assert_eq!([5, 11, 17].map(|l| (g.group_of(l), g.slot_of(l))), [(0, 0), (0, 1), (0, 2)]);
        // Every (group, slot) pair names one layer, and a layer's group has its kind.
        let mut seen = std::collections::HashSet::new();
        for (l, &w) in windowed.iter().enumerate() {
            assert!(seen.insert((g.group_of(l), g.slot_of(l))));
            assert_eq!(g.windows()[g.group_of(l)].is_some(), w);
            assert!(g.slot_of(l) < g.group_size());
        }
    }

    #[test]
    fn an_uneven_kind_leaves_its_last_group_short() {
        // Gemma 3 1B's 26 layers: 4 global, 22 windowed in 6 groups of at most 4.
        let g = groups_of(26, Some((0..26).map(|l| l % 6 != 5).collect()));
        assert_eq!(g.group_size(), 4);
        assert_eq!(g.num_groups(), 7);
        let last = (0..26).filter(|&l| g.group_of(l) == 6).count();
        assert_eq!(last, 2);
    }
}
