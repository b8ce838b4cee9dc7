//! The packed quants' memory: slabs of anonymous memory that ask for transparent huge pages.
//!
//! A batch-1 decode streams every weight once a token (Qwen2.5-Coder-0.5B: 389 MiB). On 4 KiB
//! pages that is a TLB miss and a page walk (two-dimensional under a hypervisor) every 4 KiB;
//! on 2 MiB pages one every 512 of them. A model's weights are packed one after another into
//! shared slabs, so the small ones (a layer's q/k/v and o) get huge pages too and a layer's
//! weights lie in one stream. Where the kernel gives no huge pages (THP `never`, no free 2 MiB
//! frames, not Linux) a slab is ordinary memory and nothing else changes.
//!
//! On an Intel VM batch-1 decode gains on both Qwen2.5-Coder-0.5B and SmolLM2; the KV pool
//! on huge pages was slower at long context (perhaps because every layer's blocks then share
//! cache sets), so it stays on small pages (docs/benchmarks/notebook.md,
//! "2026-11-27 02:03-03:18 UTC").

use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use memmap2::{MmapMut, MmapOptions};

const HUGE_PAGE: usize = 2 << 20;
/// Big enough that a slab is mostly whole huge pages, small enough that a tiny test model does
/// not reserve much: it is address space, backed only where written.
const SLAB_BYTES: usize = 64 << 20;
/// Each weight starts on a cache line.
const ALIGN: usize = 64;

/// One anonymous mapping that packed weights share; unmapped with the last of them.
struct Slab {
    map: MmapMut,
    /// The mapping's first byte, taken from `map` while it was still owned mutably.
    base: NonNull<u8>,
}

/// The slab new weights are packed into and its first free byte. Regions are never reused, so
/// a model dropped while the next one loaded into its last slab still lives leaves that slab's
/// part of it resident until the slab goes (at most one slab per such pair of models).
struct OpenSlab {
    slab: Weak<Slab>,
    free_from: usize,
}

static OPEN_SLAB: Mutex<Option<OpenSlab>> = Mutex::new(None);

/// Zero-initialized bytes of one packed weight, in a slab. Public so that a benchmark can read
/// memory laid out as the weights are (`entrobatch bench throughput --limits`).
pub struct QuantBytes {
    /// Keeps the mapping alive; `None` for an empty weight.
    _slab: Option<Arc<Slab>>,
    start: NonNull<u8>,
    len: usize,
}

// SAFETY: `base` is only ever offset into regions handed to `QuantBytes`, which write through
// them; the slab itself reads nothing through it.
unsafe impl Send for Slab {}
// SAFETY: as above.
unsafe impl Sync for Slab {}

// SAFETY: a `QuantBytes` is the only handle to its bytes (slab regions never overlap and are
// never handed out twice), so it is as sendable and shareable as a `Vec<u8>`.
unsafe impl Send for QuantBytes {}
// SAFETY: as above; `&QuantBytes` gives only shared access.
unsafe impl Sync for QuantBytes {}

impl QuantBytes {
    /// Fails only where the address space is exhausted.
    pub fn zeroed(len: usize) -> std::io::Result<Self> {
        if len == 0 {
            return Ok(Self { _slab: None, start: NonNull::dangling(), len });
        }
        let (slab, offset) = if len > SLAB_BYTES / 2 { (Slab::new(len)?, 0) } else { Slab::take(len)? };
        // SAFETY: `offset + len` is within the mapping (`take` and `new` size it so).
        let start = unsafe { slab.base.add(offset) };
        Ok(Self { _slab: Some(slab), start, len })
    }
}

impl Slab {
    /// A mapping of `len` bytes rounded up to whole huge pages (Linux places such a mapping on
    /// a huge-page boundary).
    fn new(len: usize) -> std::io::Result<Arc<Self>> {
        let mut map = MmapOptions::new().len(len.next_multiple_of(HUGE_PAGE)).map_anon()?;
        advise_huge_pages(&map);
        let base = NonNull::new(map.as_mut_ptr()).ok_or_else(|| std::io::Error::other("null mapping"))?;
        Ok(Arc::new(Self { map, base }))
    }

    /// `len` bytes at the open slab's first free cache line, opening a new slab where it has
    /// no room or all its weights are gone.
    fn take(len: usize) -> std::io::Result<(Arc<Self>, usize)> {
        let mut open = OPEN_SLAB.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(OpenSlab { slab, free_from }) = open.as_mut() {
            if let Some(slab) = slab.upgrade().filter(|s| *free_from + len <= s.map.len()) {
                let offset = *free_from;
                *free_from = (offset + len).next_multiple_of(ALIGN);
                return Ok((slab, offset));
            }
        }
        let slab = Self::new(SLAB_BYTES)?;
        *open = Some(OpenSlab { slab: Arc::downgrade(&slab), free_from: len.next_multiple_of(ALIGN) });
        Ok((slab, 0))
    }
}

/// Returns the heap's free pages to the system; the GGUF loader calls it after each layer.
/// Loading reads each tensor into heap buffers that are freed once it is packed, and with the
/// packed bytes in slabs the small allocations made meanwhile (scales, norms) end up above
/// those buffers' holes, so glibc cannot shrink the heap by itself: SmolLM2's peak RSS was
/// 40-48 MB higher without this.
pub(crate) fn release_freed_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `malloc_trim` only releases memory the allocator holds free.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Best effort: a mapping without huge pages still holds the weights.
fn advise_huge_pages(map: &MmapMut) {
    #[cfg(target_os = "linux")]
    if let Err(e) = map.advise(memmap2::Advice::HugePage) {
        tracing::debug!("packed weights stay on small pages: {e}");
    }
    #[cfg(not(target_os = "linux"))]
    let _ = map;
}

impl Deref for QuantBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        // SAFETY: `start` points at `len` initialized bytes (zeroed by the kernel) that only
        // this value hands out, alive while `_slab` is.
        unsafe { std::slice::from_raw_parts(self.start.as_ptr(), self.len) }
    }
}

impl DerefMut for QuantBytes {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `deref`; `&mut self` makes this the only access.
        unsafe { std::slice::from_raw_parts_mut(self.start.as_ptr(), self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Weights packed one after another get disjoint, zeroed, cache-line-aligned regions, and
    /// a slab's bytes stay readable after the weights packed beside them are dropped.
    #[test]
    fn regions_are_disjoint_zeroed_and_outlive_their_neighbours() {
        let sizes = [1, 100, 4096, 3 << 20, 7, SLAB_BYTES / 2 + 1, 65];
        let mut all: Vec<QuantBytes> = sizes.iter().map(|&n| QuantBytes::zeroed(n).unwrap()).collect();
        for (i, q) in all.iter_mut().enumerate() {
            assert_eq!(q.len(), sizes[i]);
            assert!(q.iter().all(|&b| b == 0), "weight {i} not zeroed");
            assert_eq!(q.as_ptr() as usize % ALIGN, 0, "weight {i} not on a cache line");
            q.fill(i as u8 + 1);
        }
        for (i, q) in all.iter().enumerate() {
            assert!(q.iter().all(|&b| b == i as u8 + 1), "weight {i} overlaps another");
        }
        let survivor = all.remove(3);
        drop(all);
        assert!(survivor.iter().all(|&b| b == 4), "a neighbour's drop touched the survivor");
        let after = QuantBytes::zeroed(4096).unwrap();
        assert!(after.iter().all(|&b| b == 0));
        assert!(QuantBytes::zeroed(0).unwrap().is_empty());
    }
}
