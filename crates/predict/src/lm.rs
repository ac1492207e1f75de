//! The one Levenberg–Marquardt adapter of the step-time fits (`goodput`, `itertime`):
//! bounded parameters as unconstrained coordinates, the model's Jacobian carried through
//! the reparametrisation, pinned parameters left out.
//!
//! A model implements [`Residuals`] in its own parameter space; [`Bounded`] is the
//! `levenberg_marquardt` problem over the free parameters' unconstrained coordinates.
//! (`loss_curve` keeps its own small solver on 4×4 normal equations: there the general
//! QR step dominated SLAQ's simulations.)

use levenberg_marquardt::{LeastSquaresProblem, LevenbergMarquardt, MinimizationReport};
use nalgebra::{DMatrix, DVector, Dyn, Owned};
use std::cell::RefCell;

/// How one parameter stays in its range while the solver moves freely.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Bound {
    /// `value = lower + e^u`.
    Above(f64),
    /// `value = lo + (hi − lo)·σ(u)`, σ the logistic function.
    Between(f64, f64),
}

impl Bound {
    fn decode(self, u: f64) -> f64 {
        let u = u.clamp(-60.0, 60.0);
        match self {
            Bound::Above(lower) => lower + u.exp(),
            Bound::Between(lo, hi) => lo + (hi - lo) * (1.0 / (1.0 + (-u).exp())),
        }
    }

    /// d value / d u at `value`.
    fn slope(self, value: f64) -> f64 {
        match self {
            Bound::Above(lower) => value - lower,
            Bound::Between(lo, hi) => {
                let s = (value - lo) / (hi - lo);
                (hi - lo) * s * (1.0 - s)
            }
        }
    }
}

/// A least-squares model in its own parameter space.
pub(crate) trait Residuals {
    /// Number of residuals.
    fn n_residuals(&self) -> usize;
    /// Residuals at `values`; `jp` (zeroed, `n_residuals × values.len()`) receives
    /// `∂r/∂value`.
    fn eval(&self, values: &[f64], jp: &mut DMatrix<f64>) -> DVector<f64>;
}

/// A [`Residuals`] model over the unconstrained coordinates `x` of its free parameters.
pub(crate) struct Bounded<'a, R> {
    model: &'a R,
    bounds: &'a [Bound],
    /// Every parameter's value; pinned ones never change.
    pub(crate) values: Vec<f64>,
    free: Vec<usize>,
    x: DVector<f64>,
    /// The coordinates of the last residual evaluation and the parameter-space
    /// Jacobian it computed: the solver asks for the Jacobian at the point it just
    /// evaluated and accepted, which then costs no second evaluation.
    last: RefCell<Option<(DVector<f64>, DMatrix<f64>)>>,
}

impl<'a, R: Residuals> Bounded<'a, R> {
    /// Starts at `x` (the free parameters' coordinates, in `free` order); the other
    /// parameters stay at `values`.
    pub(crate) fn new(
        model: &'a R,
        bounds: &'a [Bound],
        values: Vec<f64>,
        free: Vec<usize>,
        x: DVector<f64>,
    ) -> Self {
        let mut b = Bounded {
            model,
            bounds,
            values,
            free,
            x,
            last: RefCell::new(None),
        };
        b.decode();
        b
    }

    fn decode(&mut self) {
        for (k, &i) in self.free.iter().enumerate() {
            self.values[i] = self.bounds[i].decode(self.x[k]);
        }
    }

    fn eval(&self, jac: Option<&mut DMatrix<f64>>) -> DVector<f64> {
        let nr = self.model.n_residuals();
        let mut jp = DMatrix::zeros(nr, self.values.len());
        let r = self.model.eval(&self.values, &mut jp);
        if let Some(j) = jac {
            self.chain(&jp, j);
        }
        *self.last.borrow_mut() = Some((self.x.clone(), jp));
        r
    }

    /// `j` (free columns) from the parameter-space Jacobian `jp`.
    fn chain(&self, jp: &DMatrix<f64>, j: &mut DMatrix<f64>) {
        for (c, &i) in self.free.iter().enumerate() {
            let dv = self.bounds[i].slope(self.values[i]);
            for row in 0..jp.nrows() {
                j[(row, c)] = jp[(row, i)] * dv;
            }
        }
    }

    /// Whether the last evaluation was at the current coordinates (bit for bit).
    fn evaluated_here(&self, at: &DVector<f64>) -> bool {
        at.len() == self.x.len()
            && at
                .iter()
                .zip(self.x.iter())
                .all(|(a, b)| a.to_bits() == b.to_bits())
    }

    /// Half the sum of squared residuals at the current values.
    pub(crate) fn objective(&self) -> f64 {
        self.eval(None).norm_squared() / 2.0
    }

    /// Levenberg–Marquardt from the current point (patience 100).
    pub(crate) fn minimize(self) -> (Self, MinimizationReport<f64>) {
        LevenbergMarquardt::new().with_patience(100).minimize(self)
    }
}

impl<R: Residuals> LeastSquaresProblem<f64, Dyn, Dyn> for Bounded<'_, R> {
    type ResidualStorage = Owned<f64, Dyn>;
    type JacobianStorage = Owned<f64, Dyn, Dyn>;
    type ParameterStorage = Owned<f64, Dyn>;

    fn set_params(&mut self, x: &DVector<f64>) {
        self.x.copy_from(x);
        self.decode();
    }

    fn params(&self) -> DVector<f64> {
        self.x.clone()
    }

    fn residuals(&self) -> Option<DVector<f64>> {
        let r = self.eval(None);
        r.iter().all(|v| v.is_finite()).then_some(r)
    }

    fn jacobian(&self) -> Option<DMatrix<f64>> {
        let mut j = DMatrix::zeros(self.model.n_residuals(), self.free.len());
        let cached = match &*self.last.borrow() {
            Some((at, jp)) if self.evaluated_here(at) => {
                self.chain(jp, &mut j);
                true
            }
            _ => false,
        };
        if !cached {
            self.eval(Some(&mut j));
        }
        j.iter().all(|v| v.is_finite()).then_some(j)
    }
}
