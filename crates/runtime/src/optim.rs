//! Optimisers, applied by the controller to the aggregated gradient.
//!
//! Weight decay is applied here rather than inside the models' losses so that what
//! workers send is exactly the data-dependent gradient, which keeps the aggregation
//! check (`Σ b_i/B · g_i` = gradient on the union) free of a regulariser term.

/// Optimiser and its hyper-parameters.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum OptimSpec {
    /// `v ← μ·v + g + λ·p; p ← p − lr·v` (PyTorch's form).
    Sgd {
        lr: f32,
        momentum: f32,
        weight_decay: f32,
    },
    /// Adam with bias correction; decay is added to the gradient (L2, not AdamW).
    Adam {
        lr: f32,
        beta1: f32,
        beta2: f32,
        eps: f32,
        weight_decay: f32,
    },
}

impl OptimSpec {
    /// Same optimiser with another learning rate.
    pub fn with_lr(self, new_lr: f32) -> Self {
        match self {
            OptimSpec::Sgd {
                momentum,
                weight_decay,
                ..
            } => OptimSpec::Sgd {
                lr: new_lr,
                momentum,
                weight_decay,
            },
            OptimSpec::Adam {
                beta1,
                beta2,
                eps,
                weight_decay,
                ..
            } => OptimSpec::Adam {
                lr: new_lr,
                beta1,
                beta2,
                eps,
                weight_decay,
            },
        }
    }
    pub fn lr(&self) -> f32 {
        match self {
            OptimSpec::Sgd { lr, .. } | OptimSpec::Adam { lr, .. } => *lr,
        }
    }
}

/// Optimiser state for one parameter vector.
#[derive(Debug, Clone, PartialEq)]
pub struct Optimizer {
    spec: OptimSpec,
    m: Vec<f32>,
    v: Vec<f32>,
    t: u32,
}

impl Optimizer {
    pub fn new(spec: OptimSpec, n_params: usize) -> Self {
        let v = match spec {
            OptimSpec::Adam { .. } => vec![0.0; n_params],
            OptimSpec::Sgd { .. } => Vec::new(),
        };
        Optimizer {
            spec,
            m: vec![0.0; n_params],
            v,
            t: 0,
        }
    }

    pub fn spec(&self) -> OptimSpec {
        self.spec
    }

    /// The state a checkpoint keeps: steps taken, first moment (SGD's momentum
    /// buffer), second moment (Adam's; empty for SGD).
    pub fn state(&self) -> (u32, &[f32], &[f32]) {
        (self.t, &self.m, &self.v)
    }

    /// An optimiser with the state [`Self::state`] returned; an error when the
    /// vectors do not fit the spec (`v` empty for SGD, as long as `m` for Adam).
    pub fn restore(spec: OptimSpec, t: u32, m: Vec<f32>, v: Vec<f32>) -> Result<Self, String> {
        let v_len = match spec {
            OptimSpec::Adam { .. } => m.len(),
            OptimSpec::Sgd { .. } => 0,
        };
        if v.len() != v_len {
            return Err(format!(
                "{} second-moment values for {} parameters, expected {v_len}",
                v.len(),
                m.len()
            ));
        }
        Ok(Optimizer { spec, m, v, t })
    }

    /// One step of `params` along `grad`.
    pub fn step(&mut self, params: &mut [f32], grad: &[f32]) {
        self.begin_step();
        self.step_range(params, grad, 0..params.len());
    }

    /// Start a step that is then applied range by range with [`Self::step_range`]
    /// (elementwise, so the ranges give exactly [`Self::step`]): the controller
    /// sends each updated range while it computes the next.
    pub fn begin_step(&mut self) {
        self.t += 1;
    }

    /// The current step on `params[r]` with `grad[r]`.
    pub fn step_range(&mut self, params: &mut [f32], grad: &[f32], r: std::ops::Range<usize>) {
        let (params, grad) = (&mut params[r.clone()], &grad[r.clone()]);
        let m = &mut self.m[r.clone()];
        match self.spec {
            OptimSpec::Sgd {
                lr,
                momentum,
                weight_decay,
            } => {
                for ((p, &g), m) in params.iter_mut().zip(grad).zip(m) {
                    let g = g + weight_decay * *p;
                    *m = momentum * *m + g;
                    *p -= lr * *m;
                }
            }
            OptimSpec::Adam {
                lr,
                beta1,
                beta2,
                eps,
                weight_decay,
            } => {
                let c1 = 1.0 - beta1.powi(self.t as i32);
                let c2 = 1.0 - beta2.powi(self.t as i32);
                let step = lr / c1;
                let c2s = c2.sqrt();
                for (((p, &g), m), v) in params.iter_mut().zip(grad).zip(m).zip(&mut self.v[r]) {
                    let g = g + weight_decay * *p;
                    *m = beta1 * *m + (1.0 - beta1) * g;
                    *v = beta2 * *v + (1.0 - beta2) * g * g;
                    *p -= step * *m / (v.sqrt() / c2s + eps);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_minimise_a_quadratic() {
        for spec in [
            OptimSpec::Sgd {
                lr: 0.1,
                momentum: 0.9,
                weight_decay: 0.0,
            },
            OptimSpec::Adam {
                lr: 0.05,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.0,
            },
        ] {
            let mut o = Optimizer::new(spec, 2);
            let mut p = vec![3.0f32, -2.0];
            for _ in 0..500 {
                let g: Vec<f32> = p.iter().map(|x| 2.0 * x).collect();
                o.step(&mut p, &g);
            }
            assert!(p.iter().all(|x| x.abs() < 1e-2), "{spec:?}: {p:?}");
        }
    }

    #[test]
    fn ranges_give_exactly_the_whole_step() {
        let spec = OptimSpec::Adam {
            lr: 0.01,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 1e-4,
        };
        let (mut a, mut b) = (Optimizer::new(spec, 10), Optimizer::new(spec, 10));
        let mut pa: Vec<f32> = (0..10).map(|i| i as f32 * 0.3 - 1.0).collect();
        let mut pb = pa.clone();
        for k in 0..5 {
            let g: Vec<f32> = (0..10).map(|i| ((i * 7 + k) % 5) as f32 - 2.0).collect();
            a.step(&mut pa, &g);
            b.begin_step();
            for r in [0..3, 3..4, 4..10] {
                b.step_range(&mut pb, &g, r);
            }
        }
        assert_eq!(pa, pb);
    }
}
