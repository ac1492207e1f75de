//! Saving and restoring a [`Narx`]'s learnt state (`super::super::state`).

use super::super::state::{finite, finite_n};
use super::super::{ExoFilterState, NarxState, RlsState};
use super::{ExoFilter, LoadPool, Narx, Rls};

impl Rls {
    fn save(&self) -> RlsState {
        RlsState {
            w: self.w.clone(),
            p: self.p.clone(),
        }
    }

    /// Checked whole before anything is set. `p_phi` is scratch, fully rewritten
    /// before every use.
    fn restore(&mut self, field: &str, s: &RlsState) -> Result<(), String> {
        let n = self.w.len();
        finite_n(&format!("{field}.w"), &s.w, n)?;
        finite_n(&format!("{field}.p"), &s.p, n * n)?;
        self.w.copy_from_slice(&s.w);
        self.p.copy_from_slice(&s.p);
        Ok(())
    }
}

impl ExoFilter {
    fn save(&self) -> ExoFilterState {
        ExoFilterState {
            value: self.value.is_finite().then_some(self.value),
            scale: self.scale,
            seen: self.seen,
            run: self.run,
        }
    }

    fn from_state(field: &str, s: &ExoFilterState) -> Result<Self, String> {
        let v = [s.value.unwrap_or(0.0), s.scale, s.seen, s.run];
        finite(field, &v)?;
        if !(s.scale > 0.0 && s.seen >= 0.0 && s.run >= 0.0) {
            return Err(format!(
                "{field}: scale {} must be > 0, seen {} and run {} ≥ 0",
                s.scale, s.seen, s.run
            ));
        }
        Ok(ExoFilter {
            value: s.value.unwrap_or(f64::NAN),
            scale: s.scale,
            seen: s.seen,
            run: s.run,
        })
    }
}

impl LoadPool {
    /// The learnt part of the shared load response (its random units follow from the
    /// seed).
    pub(in crate::speed) fn save(&self) -> RlsState {
        self.with_rls(|r| r.save())
    }

    pub(in crate::speed) fn restore(&self, s: &RlsState) -> Result<(), String> {
        self.with_rls(|r| r.restore("pool", s))
    }
}

impl Narx {
    pub(super) fn save_state(&self) -> NarxState {
        NarxState {
            ar: self.ar.save(),
            innovations: self.innovations.clone(),
            filters: [self.filters[0].save(), self.filters[1].save()],
            exo_hist: self.exo_hist.clone(),
            ln_hist: self.ln_hist.clone(),
            level: self.level,
            seen: self.seen,
        }
    }

    /// Continue from `s` (this model's seed and pool must be the saved one's). Checked
    /// whole before anything is set.
    pub(in crate::speed) fn restore(&mut self, s: &NarxState) -> Result<(), String> {
        let mut ar = self.ar.clone();
        ar.restore("ar", &s.ar)?;
        finite_n("innovations", &s.innovations, self.innovations.len())?;
        finite_n("exo_hist", &s.exo_hist, self.exo_hist.len())?;
        finite_n("ln_hist", &s.ln_hist, self.ln_hist.len())?;
        finite("level", &[s.level])?;
        let filters = [
            ExoFilter::from_state("filters[0]", &s.filters[0])?,
            ExoFilter::from_state("filters[1]", &s.filters[1])?,
        ];
        self.ar = ar;
        self.innovations.copy_from_slice(&s.innovations);
        self.exo_hist.copy_from_slice(&s.exo_hist);
        self.ln_hist.copy_from_slice(&s.ln_hist);
        self.filters = filters;
        self.level = s.level;
        self.seen = s.seen;
        Ok(())
    }
}
