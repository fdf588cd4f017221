//! One check's verdict over time: `fall` failures in a row take a server out, `rise`
//! successes in a row bring it back, so a server that flaps faster than that keeps its
//! state. Pure; the runner feeds it results.

/// What the checks say of a server for one service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No check has finished yet: kept out of answers (never published as healthy
    /// before it was checked).
    Unknown,
    Up,
    Down,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Track {
    pub verdict: Verdict,
    /// Results in a row that disagree with the verdict.
    against: u32,
}

impl Track {
    pub fn new(verdict: Verdict) -> Track {
        Track {
            verdict,
            against: 0,
        }
    }

    /// Takes one check's result; returns the new verdict when it changed. The first result
    /// decides at once: before it the server is out, and waiting for `rise` would only
    /// delay a healthy start.
    pub fn observe(&mut self, ok: bool, rise: u32, fall: u32) -> Option<Verdict> {
        let (agrees, need, flip) = match self.verdict {
            Verdict::Unknown => {
                self.verdict = if ok { Verdict::Up } else { Verdict::Down };
                return Some(self.verdict);
            }
            Verdict::Up => (ok, fall, Verdict::Down),
            Verdict::Down => (!ok, rise, Verdict::Up),
        };
        if agrees {
            self.against = 0;
            return None;
        }
        self.against += 1;
        if self.against >= need.max(1) {
            self.verdict = flip;
            self.against = 0;
            return Some(flip);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn feed(t: &mut Track, results: &[bool]) -> Vec<Verdict> {
        results
            .iter()
            .filter_map(|&ok| t.observe(ok, 2, 3))
            .collect()
    }

    #[test]
    fn first_result_decides_then_thresholds() {
        let mut t = Track::new(Verdict::Unknown);
        assert_eq!(feed(&mut t, &[true]), [Verdict::Up]);
        assert_eq!(feed(&mut t, &[false, false]), []);
        assert_eq!(feed(&mut t, &[false]), [Verdict::Down]);
        assert_eq!(feed(&mut t, &[true]), []);
        assert_eq!(feed(&mut t, &[true]), [Verdict::Up]);
        let mut t = Track::new(Verdict::Unknown);
        assert_eq!(feed(&mut t, &[false]), [Verdict::Down]);
    }

    #[test]
    fn a_success_resets_the_failures() {
        let mut t = Track::new(Verdict::Up);
        assert_eq!(feed(&mut t, &[false, false, true, false, false, true]), []);
        assert_eq!(t.verdict, Verdict::Up);
    }

    proptest! {
        /// Flapping faster than the thresholds never changes a known verdict: with runs of
        /// failures shorter than `fall` and of successes shorter than `rise`, nothing moves.
        #[test]
        fn flapping_below_thresholds_changes_nothing(
            runs in proptest::collection::vec(1u32..=5, 0..50),
            rise in 1u32..=6, fall in 1u32..=6, up: bool,
        ) {
            let start = if up { Verdict::Up } else { Verdict::Down };
            let mut t = Track::new(start);
            let mut ok = up;
            for r in runs {
                ok = !ok;
                // A run against the verdict shorter than its threshold.
                let need = if up { fall } else { rise };
                let n = if ok != up { r.min(need - 1) } else { r };
                for _ in 0..n {
                    prop_assert_eq!(t.observe(ok, rise, fall), None);
                }
            }
            prop_assert_eq!(t.verdict, start);
        }

        /// `need` results in a row against the verdict always flip it, exactly then.
        #[test]
        fn thresholds_flip_exactly(rise in 1u32..=6, fall in 1u32..=6, up: bool) {
            let start = if up { Verdict::Up } else { Verdict::Down };
            let mut t = Track::new(start);
            let need = if up { fall } else { rise };
            for i in 1..=need {
                let changed = t.observe(!up, rise, fall);
                prop_assert_eq!(changed.is_some(), i == need);
            }
            prop_assert_ne!(t.verdict, start);
        }
    }
}
