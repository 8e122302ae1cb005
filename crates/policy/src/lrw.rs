//! `lrw`: least recently written (NVFAT, seed 004 section 3.2): the destage order of a write
//! cache. Only writes move a slot to the back; reads leave the order alone (a write cache
//! destages what has been rewritten least lately, whatever is read). The victim is the front.
//! Every method is O(1).

use crate::SlotList;

/// The slots of a write cache in the order they were last written (front: the oldest).
#[derive(Clone, Debug, Default)]
pub struct Lrw {
    order: SlotList,
}

impl Lrw {
    pub fn new() -> Lrw {
        Lrw {
            order: SlotList::new(),
        }
    }

    pub fn len(&self) -> u32 {
        self.order.len()
    }

    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// `slot` was just written (it becomes the most recently written).
    pub fn written(&mut self, slot: u32) {
        if self.order.contains(slot) {
            self.order.move_to_back(slot);
        } else {
            self.order.push_back(slot);
        }
    }

    /// `slot` leaves (destaged or replaced by a newer copy).
    pub fn remove(&mut self, slot: u32) {
        self.order.remove(slot);
    }

    /// The least recently written slot, if any.
    pub fn victim(&self) -> Option<u32> {
        self.order.front()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lrw_destages_the_least_recently_written_and_ignores_reads() {
        let mut p = Lrw::new();
        for s in [4, 2, 9] {
            p.written(s);
        }
        assert_eq!(p.victim(), Some(4));
        p.written(4); // rewritten: now the newest
        assert_eq!(p.victim(), Some(2));
        p.remove(2);
        assert_eq!(p.victim(), Some(9));
        assert_eq!(p.len(), 2);
        p.remove(9);
        p.remove(4);
        assert!(p.is_empty() && p.victim().is_none());
    }
}
