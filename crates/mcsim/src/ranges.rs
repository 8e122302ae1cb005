//! The range registers of Figure 4: PersistenceMalloc binds an address range to a bindable
//! sub-queue; every address no register names goes to the last sub-queue.

/// The bound ranges, and per bindable sub-queue the registers it uses.
pub(crate) struct Ranges {
    line_bytes: u64,
    registers_per_queue: u32,
    /// Bound ranges in lines, inclusive: (first, last, sub-queue), in binding order.
    ranges: Vec<(u64, u64, u32)>,
    /// The same ranges by first line, searched in halves while no two overlap (`disjoint`):
    /// then the one range holding a line is the first bound that does.
    sorted: Vec<(u64, u64, u32)>,
    disjoint: bool,
    binds: Vec<u32>,
}

impl Ranges {
    pub fn new(sub_queues: u32, registers_per_queue: u32, line_bytes: u32) -> Ranges {
        assert!(sub_queues >= 1, "the unregistered sub-queue exists");
        Ranges {
            line_bytes: line_bytes.into(),
            registers_per_queue,
            ranges: Vec::new(),
            sorted: Vec::new(),
            disjoint: true,
            binds: vec![0; sub_queues as usize],
        }
    }

    /// The sub-queue of every unregistered address.
    pub fn unregistered(&self) -> u32 {
        self.binds.len() as u32 - 1
    }

    fn lines(&self, addr: u64, len: u64) -> (u64, u64) {
        assert!(len > 0, "a range holds a byte");
        (addr / self.line_bytes, (addr + len - 1) / self.line_bytes)
    }

    /// PersistenceMalloc: bind the range to the bindable sub-queue with the fewest ranges
    /// (the OS's "lowest utilisation"); when every register is taken it stays unregistered.
    pub fn bind(&mut self, addr: u64, len: u64) {
        let (first, last) = self.lines(addr, len);
        let q = (0..self.unregistered())
            .filter(|&q| self.binds[q as usize] < self.registers_per_queue)
            .min_by_key(|&q| self.binds[q as usize]);
        if let Some(q) = q {
            self.binds[q as usize] += 1;
            self.ranges.push((first, last, q));
            let at = self.sorted.partition_point(|r| r.0 <= first);
            let overlaps =
                |r: Option<&(u64, u64, u32)>| r.is_some_and(|r| r.0 <= last && first <= r.1);
            // Sorted and disjoint before: only the neighbours can overlap the new range.
            if overlaps(at.checked_sub(1).and_then(|i| self.sorted.get(i)))
                || overlaps(self.sorted.get(at))
            {
                self.disjoint = false;
            }
            self.sorted.insert(at, (first, last, q));
        }
    }

    /// The sub-queue a write of `line` enters.
    pub fn queue_of(&self, line: u64) -> u32 {
        let hit = if self.disjoint {
            let at = self.sorted.partition_point(|r| r.0 <= line);
            at.checked_sub(1)
                .map(|i| self.sorted[i])
                .filter(|r| line <= r.1)
        } else {
            self.first_holding(line)
        };
        debug_assert_eq!(
            hit,
            self.first_holding(line),
            "the search finds the first range bound that holds the line"
        );
        hit.map_or(self.unregistered(), |r| r.2)
    }

    /// The first range bound that holds `line`, by a scan in binding order.
    fn first_holding(&self, line: u64) -> Option<(u64, u64, u32)> {
        let holds = |r: &&(u64, u64, u32)| (r.0..=r.1).contains(&line);
        self.ranges.iter().find(holds).copied()
    }

    /// The sub-queues a commit of [addr, addr+len) must drain: those of the bound ranges it
    /// overlaps, and the unregistered one unless one bound range covers it whole.
    pub fn queues_of_range(&self, addr: u64, len: u64) -> u32 {
        let (first, last) = self.lines(addr, len);
        let mut mask = 0;
        let mut covered = false;
        for &(f, l, q) in &self.ranges {
            if f <= last && first <= l {
                mask |= 1 << q;
                covered |= f <= first && last <= l;
            }
        }
        if !covered {
            mask |= 1 << self.unregistered();
        }
        mask
    }
}
