//! [`PageAllocator`]: which physical KV pages are free.
//!
//! A page is `page_size` token slots of every attention layer's K and V cache (the layout of
//! `gpu::kernels::kv_cache`); all layers place a token in the same page, so one page number
//! stands for that slot range in every layer. Pages are handed out lowest number first, so a
//! fresh engine's first sequence gets the identity table.

use super::CacheError;

pub struct PageAllocator {
    /// Free pages, the next to hand out last.
    free: Vec<u32>,
    in_use: Vec<bool>,
}

impl PageAllocator {
    pub fn new(n_pages: u32) -> PageAllocator {
        PageAllocator {
            free: (0..n_pages).rev().collect(),
            in_use: vec![false; n_pages as usize],
        }
    }

    pub fn n_pages(&self) -> u32 {
        self.in_use.len() as u32
    }

    pub fn free_count(&self) -> usize {
        self.free.len()
    }

    pub fn used_count(&self) -> usize {
        self.in_use.len() - self.free.len()
    }

    pub fn in_use(&self, page: u32) -> bool {
        self.in_use.get(page as usize).copied().unwrap_or(false)
    }

    /// `n` pages, or `None` (and nothing taken) when fewer are free.
    pub fn alloc(&mut self, n: usize) -> Option<Vec<u32>> {
        if n > self.free.len() {
            return None;
        }
        let pages = self.free.split_off(self.free.len() - n);
        let pages: Vec<u32> = pages.into_iter().rev().collect();
        for &p in &pages {
            self.in_use[p as usize] = true;
        }
        Some(pages)
    }

    /// Returns pages to the pool. A page that is not in use (never handed out, or freed twice)
    /// is an error and nothing is freed: a page in two places would corrupt two sequences.
    pub fn free(&mut self, pages: &[u32]) -> Result<(), CacheError> {
        for (i, &p) in pages.iter().enumerate() {
            let owned = self.in_use.get(p as usize).copied().unwrap_or(false);
            if !owned || pages[..i].contains(&p) {
                return Err(CacheError::PageNotInUse {
                    page: p,
                    n_pages: self.n_pages(),
                });
            }
        }
        for &p in pages {
            self.in_use[p as usize] = false;
            self.free.push(p);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_come_out_lowest_first_and_return_to_the_pool() {
        let mut a = PageAllocator::new(6);
        assert_eq!(a.alloc(3), Some(vec![0, 1, 2]));
        assert_eq!(a.alloc(4), None, "only 3 left");
        assert_eq!(a.free_count(), 3);
        a.free(&[1]).unwrap();
        assert_eq!(a.used_count(), 2);
        assert_eq!(a.alloc(1), Some(vec![1]), "a freed page is reused");
        assert_eq!(a.alloc(3), Some(vec![3, 4, 5]));
        assert_eq!(a.alloc(1), None);
    }

    #[test]
    fn freeing_a_page_not_in_use_is_refused_whole() {
        let mut a = PageAllocator::new(4);
        let pages = a.alloc(2).unwrap();
        a.free(&pages).unwrap();
        let twice = a.free(&pages).unwrap_err();
        assert!(matches!(twice, CacheError::PageNotInUse { page: 0, .. }));
        let held = a.alloc(1).unwrap();
        assert!(
            a.free(&[held[0], held[0]]).is_err(),
            "duplicate in one call"
        );
        assert!(a.free(&[held[0], 9]).is_err(), "past the pool");
        assert_eq!(a.used_count(), 1, "a refused free frees nothing");
    }
}
