//! In-memory cache of decoded training images.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::{Scene, ViewImage, dataset_error};
use crate::IoError;

/// Decoded views of a [`Scene`] ([`Scene::load_view`]: RGB, and alpha and mask where the view
/// has them; [`ImageCache::keep_alpha`] drops alpha) kept in RAM, up to a byte budget.
///
/// Policy: **keep-first**. An image is cached when it is decoded and fits in what is left of
/// the budget; nothing is ever evicted. Once the budget is full, [`ImageCache::get`] decodes
/// the remaining views on every call (and does not keep them). With the random view order of
/// training, keep-first has the same hit rate as LRU (budget / total) without eviction
/// churn, and the cached set stays stable.
///
/// `ImageCache` is `Send + Sync`: share it (e.g. in an `Arc`) between a prefetch thread and the
/// trainer. Two threads asking for the same uncached view may both decode it; only one copy is
/// kept.
#[derive(Debug)]
pub struct ImageCache {
    scene: Arc<Scene>,
    budget: u64,
    used: AtomicU64,
    keep_alpha: bool,
    slots: Vec<OnceLock<Arc<ViewImage>>>,
}

impl ImageCache {
    /// An empty cache over `scene` that keeps at most `budget_bytes` of decoded pixels.
    pub fn new(scene: Arc<Scene>, budget_bytes: u64) -> Self {
        let slots = (0..scene.views.len()).map(|_| OnceLock::new()).collect();
        Self {
            scene,
            budget: budget_bytes,
            used: AtomicU64::new(0),
            keep_alpha: true,
            slots,
        }
    }

    /// Whether views keep their alpha channel ([`ViewImage::alpha`]; default true). Without it
    /// (when nothing uses alpha) an RGBA view takes 3 instead of 4 bytes per pixel. Set it
    /// before loading anything.
    pub fn keep_alpha(mut self, keep: bool) -> Self {
        self.keep_alpha = keep;
        self
    }

    fn load(&self, i: usize) -> Result<ViewImage, IoError> {
        self.scene.load(i, self.keep_alpha, true)
    }

    /// The scene.
    pub fn scene(&self) -> &Arc<Scene> {
        &self.scene
    }

    /// Bytes of decoded images held.
    pub fn cached_bytes(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// The byte budget.
    pub fn budget_bytes(&self) -> u64 {
        self.budget
    }

    /// Whether view `i` is held in memory.
    pub fn is_cached(&self, i: usize) -> bool {
        self.slots.get(i).is_some_and(|s| s.get().is_some())
    }

    fn check_index(&self, i: usize) -> Result<(), IoError> {
        if i < self.slots.len() {
            Ok(())
        } else {
            Err(dataset_error(
                &self.scene.root,
                format!(
                    "view index {i} is out of range ({} views)",
                    self.slots.len()
                ),
            ))
        }
    }

    /// Keeps `image` as view `i` if it fits in the budget.
    fn offer(&self, i: usize, image: &Arc<ViewImage>) {
        let size = image.bytes();
        let reserved = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |u| {
                u.checked_add(size).filter(|&t| t <= self.budget)
            })
            .is_ok();
        if reserved && self.slots[i].set(image.clone()).is_err() {
            // Another thread stored it first.
            self.used.fetch_sub(size, Ordering::AcqRel);
        }
    }

    /// View `i` ([`Scene::load_view`]), from memory when cached, else decoded now (and kept
    /// when it fits in the budget).
    pub fn get(&self, i: usize) -> Result<Arc<ViewImage>, IoError> {
        self.check_index(i)?;
        if let Some(image) = self.slots[i].get() {
            return Ok(image.clone());
        }
        let image = Arc::new(self.load(i)?);
        self.offer(i, &image);
        Ok(image)
    }

    /// Decodes the listed views in parallel (`std::thread::scope` over
    /// `available_parallelism` threads) and caches them, in list order, until the budget is
    /// full: views that would not fit are not decoded. Returns the first decoding error (the
    /// other threads stop taking new work). Whether an image has alpha is only known once it
    /// is decoded, so the planned size counts RGB and the mask; a view whose alpha channel
    /// then overflows the budget is decoded but not kept.
    pub fn preload(&self, indices: &[usize]) -> Result<(), IoError> {
        for &i in indices {
            self.check_index(i)?;
        }
        // Keep-first: the prefix of uncached views that fits in what is left of the budget.
        let mut left = self.budget.saturating_sub(self.cached_bytes());
        let mut todo = Vec::new();
        let mut seen = vec![false; self.slots.len()];
        for &i in indices {
            if self.is_cached(i) || std::mem::replace(&mut seen[i], true) {
                continue;
            }
            let v = &self.scene.views[i];
            let planes = 3 + self.scene.mask_path(i).is_some() as u64;
            let size = v.camera.width as u64 * v.camera.height as u64 * planes;
            if size > left {
                break;
            }
            left -= size;
            todo.push(i);
        }
        if todo.is_empty() {
            return Ok(());
        }
        let threads = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .min(todo.len());
        let next = AtomicUsize::new(0);
        let error: Mutex<Option<IoError>> = Mutex::new(None);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    loop {
                        let k = next.fetch_add(1, Ordering::Relaxed);
                        let Some(&i) = todo.get(k) else { break };
                        if error.lock().map(|e| e.is_some()).unwrap_or(true) {
                            break;
                        }
                        match self.load(i) {
                            Ok(image) => self.offer(i, &Arc::new(image)),
                            Err(e) => {
                                if let Ok(mut slot) = error.lock() {
                                    slot.get_or_insert(e);
                                }
                                break;
                            }
                        }
                    }
                });
            }
        });
        match error.into_inner() {
            Ok(Some(e)) => Err(e),
            _ => Ok(()),
        }
    }
}
