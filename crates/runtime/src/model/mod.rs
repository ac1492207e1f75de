//! Models with hand-written forward and backward passes.
//!
//! All parameters of a model live in one flat `Vec<f32>` so that the controller can
//! aggregate, optimise and ship them without knowing the model, and so that the
//! correctness test can compare a distributed step with a single-process one
//! element by element. Matrix products go through `matrixmultiply::sgemm`
//! (single-threaded: one worker is one thread).
//!
//! Every `loss_grad` returns the **mean** gradient over its local batch; the
//! controller's weighted sum `Σ b_i/B · g_i` is then the mean over the union.
//!
//! | name     | model                                   | default optimiser |
//! |----------|-----------------------------------------|-------------------|
//! | `logreg` | multinomial logistic regression          | SGD + momentum    |
//! | `svm`    | linear multiclass SVM (Crammer–Singer hinge) | SGD + momentum |
//! | `mlp`    | dim → hidden (ReLU) → classes, softmax   | Adam              |
//! | `kmeans` | K centroids, loss ½‖x − c(x)‖²           | SGD (mini-batch K-means) |

mod kmeans;
mod linear;
mod mlp;

pub use kmeans::KMeans;
pub use linear::{Linear, LinearLoss};
pub use mlp::Mlp;

use crate::data::Dataset;
use crate::error::RuntimeError;
use crate::optim::OptimSpec;

/// Names accepted by [`ModelSpec::new`], in [`ModelKind::ALL`]'s order.
pub const MODELS: [&str; 4] = ["logreg", "svm", "mlp", "kmeans"];

/// The runtime's models, each with its wire id: the `model.kind` byte of the
/// `Welcome` frame (`crate::protocol`). Ids are fixed once given: a new model is a
/// new variant with the next id, its name in [`MODELS`], and its arms in
/// [`ModelSpec::n_params`] and [`ModelSpec::build`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ModelKind {
    Logreg = 0,
    Svm = 1,
    Mlp = 2,
    Kmeans = 3,
}

impl ModelKind {
    /// Every kind, by wire id.
    pub const ALL: [ModelKind; 4] = [
        ModelKind::Logreg,
        ModelKind::Svm,
        ModelKind::Mlp,
        ModelKind::Kmeans,
    ];

    /// The byte that names this kind on the wire.
    pub const fn wire_id(self) -> u8 {
        self as u8
    }

    /// The kind a peer names; `None` for an id this build does not know.
    pub fn from_wire(id: u8) -> Option<ModelKind> {
        ModelKind::ALL.into_iter().find(|k| k.wire_id() == id)
    }

    /// The kind named on the command line (`--model`).
    pub fn from_name(name: &str) -> Option<ModelKind> {
        ModelKind::ALL.into_iter().find(|k| k.name() == name)
    }

    pub fn name(self) -> &'static str {
        MODELS[self.wire_id() as usize]
    }

    /// The config field of the model's size (`ModelSpec::width`), if it has one.
    pub fn width_field(self) -> Option<&'static str> {
        match self {
            ModelKind::Mlp => Some("hidden"),
            ModelKind::Kmeans => Some("clusters"),
            ModelKind::Logreg | ModelKind::Svm => None,
        }
    }
}

/// What a batch gradient computation measured besides the gradient.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct BatchStats {
    /// Sum (not mean) of per-sample losses.
    pub loss_sum: f64,
    /// Samples classified correctly (0 for K-means).
    pub correct: u32,
}

/// Test-set quality.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct Quality {
    pub accuracy: f64,
    pub loss: f64,
}

/// A differentiable model over flat parameters.
pub trait Model: Send + Sync {
    fn name(&self) -> &'static str;
    fn n_params(&self) -> usize;
    /// Initial parameters, deterministic in `seed` (K-means picks training samples).
    fn init(&self, seed: u64, train: &Dataset) -> Vec<f32>;
    /// Mean loss gradient over the `b` rows of `x` (`b × dim`) into `grad`.
    fn loss_grad(&self, params: &[f32], x: &[f32], y: &[u32], grad: &mut [f32]) -> BatchStats;
    /// Accuracy and mean loss on `test`; `train` is there for models whose
    /// predictions need it (K-means labels its clusters by training majority).
    fn evaluate(&self, params: &[f32], train: &Dataset, test: &Dataset) -> Quality;
    /// The optimiser this model trains well with.
    fn default_optimizer(&self) -> OptimSpec;
    /// Set when the forward pass can start before all parameters have arrived.
    fn pipelined(&self) -> Option<&dyn Pipelined> {
        None
    }
}

/// A model whose forward pass runs in blocks that each need only a prefix of the
/// parameters, so a worker can compute while the rest is still arriving
/// (`begin`, `forward_block` for every block in order, `finish` = `loss_grad`).
pub trait Pipelined: Send + Sync {
    fn blocks(&self) -> usize;
    /// Parameters `[0, block_end(j))` must be there before block `j` runs.
    fn block_end(&self, j: usize) -> usize;
    /// Reset the forward state for a batch of `b` rows.
    fn begin(&self, b: usize, state: &mut Vec<f32>);
    fn forward_block(&self, params: &[f32], x: &[f32], b: usize, j: usize, state: &mut Vec<f32>);
    /// The rest of the step, with every parameter there: `finish_head`, then every
    /// backward block in order.
    fn finish(
        &self,
        params: &[f32],
        x: &[f32],
        y: &[u32],
        state: &mut Vec<f32>,
        grad: &mut [f32],
    ) -> BatchStats {
        let stats = self.finish_head(params, x, y, state, grad);
        for j in 0..self.grad_blocks() {
            self.backward_block(x, y.len(), j, state, grad);
        }
        stats
    }
    /// The rest of the forward pass and the backward pass, except the gradient's
    /// leading values (`grad_block(j)` for every j), which `backward_block` computes
    /// afterwards from `state`: a worker sends each block of the gradient while it
    /// computes the next (the chunked uplink).
    fn finish_head(
        &self,
        params: &[f32],
        x: &[f32],
        y: &[u32],
        state: &mut Vec<f32>,
        grad: &mut [f32],
    ) -> BatchStats;
    fn grad_blocks(&self) -> usize;
    /// The gradient values block `j` computes: consecutive ranges from 0, in order.
    fn grad_block(&self, j: usize) -> std::ops::Range<usize>;
    fn backward_block(&self, x: &[f32], b: usize, j: usize, state: &[f32], grad: &mut [f32]);
}

/// Most parameters a model may have (2^28 `f32`s, 1 GiB per copy; the controller
/// and every worker hold several copies).
pub const MAX_PARAMS: u64 = 1 << 28;

/// A model choice with its shape, as sent in the handshake.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelSpec {
    pub kind: ModelKind,
    pub dim: u32,
    pub classes: u32,
    /// MLP hidden units, or K-means clusters.
    pub width: u32,
}

impl ModelSpec {
    /// `width` is the MLP's hidden size or K-means' cluster count (ignored otherwise).
    pub fn new(name: &str, dim: usize, classes: usize, width: usize) -> Result<Self, RuntimeError> {
        let kind = ModelKind::from_name(name).ok_or_else(|| {
            RuntimeError::config(
                "model",
                format!("unknown model `{name}`; known: {}", MODELS.join(", ")),
            )
        })?;
        let width_field = kind.width_field();
        if let (Some(flag), 0) = (width_field, width) {
            return Err(RuntimeError::config(flag, "must be > 0"));
        }
        let narrow = |v: usize, what: &str| {
            u32::try_from(v).map_err(|_| {
                RuntimeError::config(what, format!("{v} exceeds the largest size, {}", u32::MAX))
            })
        };
        let spec = ModelSpec {
            kind,
            dim: narrow(dim, "dataset features")?,
            classes: narrow(classes, "dataset classes")?,
            width: match width_field {
                Some(flag) => narrow(width, flag)?,
                // Ignored by these models; kept as given (it is part of the handshake).
                None => width as u32,
            },
        };
        match spec.n_params() {
            Some(n) if n <= MAX_PARAMS => Ok(spec),
            _ => Err(RuntimeError::config(
                width_field.unwrap_or("model"),
                format!(
                    "{name} with width {width} on {dim} features and {classes} classes: more \
                     than {MAX_PARAMS} parameters, the most a model may have"
                ),
            )),
        }
    }

    /// Number of parameters the model will have (`None` if it does not fit in a
    /// `u64`). Computed without building the model, so a spec from the command line
    /// or from a peer can be checked before anything is allocated.
    pub fn n_params(&self) -> Option<u64> {
        let (d, c, w) = (self.dim as u64, self.classes as u64, self.width as u64);
        match self.kind {
            // Weights and biases: d·c + c.
            ModelKind::Logreg | ModelKind::Svm => d.checked_mul(c)?.checked_add(c),
            // d·w + w + w·c + c.
            ModelKind::Mlp => d
                .checked_mul(w)?
                .checked_add(w)?
                .checked_add(w.checked_mul(c)?)?
                .checked_add(c),
            ModelKind::Kmeans => w.checked_mul(d),
        }
    }

    pub fn name(&self) -> &'static str {
        self.kind.name()
    }

    /// Build the model.
    pub fn build(&self) -> Box<dyn Model> {
        let (d, c, w) = (
            self.dim as usize,
            self.classes as usize,
            self.width as usize,
        );
        match self.kind {
            ModelKind::Logreg => Box::new(Linear::new(d, c, LinearLoss::Softmax)),
            ModelKind::Svm => Box::new(Linear::new(d, c, LinearLoss::Hinge)),
            ModelKind::Mlp => Box::new(Mlp::new(d, w, c)),
            ModelKind::Kmeans => Box::new(KMeans::new(d, w, c)),
        }
    }
}

/// `C = alpha · op(A) · op(B) + beta · C`, all row-major; `op(A)` is `m × k`,
/// `op(B)` is `k × n`. A transposed operand is stored as its untransposed shape.
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm(
    m: usize,
    k: usize,
    n: usize,
    alpha: f32,
    a: &[f32],
    trans_a: bool,
    b: &[f32],
    trans_b: bool,
    beta: f32,
    c: &mut [f32],
) {
    assert!(a.len() >= m * k && b.len() >= k * n && c.len() >= m * n);
    let (rsa, csa) = if trans_a {
        (1, m as isize)
    } else {
        (k as isize, 1)
    };
    let (rsb, csb) = if trans_b {
        (1, k as isize)
    } else {
        (n as isize, 1)
    };
    // SAFETY: the assert above bounds every index sgemm touches by the slice lengths
    // (row/column strides describe exactly an m×k, k×n and m×n row-major block).
    unsafe {
        matrixmultiply::sgemm(
            m,
            k,
            n,
            alpha,
            a.as_ptr(),
            rsa,
            csa,
            b.as_ptr(),
            rsb,
            csb,
            beta,
            c.as_mut_ptr(),
            n as isize,
            1,
        );
    }
}

/// Rows of logits → softmax probabilities in place; returns (loss sum, correct).
pub(crate) fn softmax_xent(logits: &mut [f32], y: &[u32], classes: usize) -> (f64, u32) {
    let mut loss = 0.0f64;
    let mut correct = 0;
    for (row, &label) in logits.chunks_mut(classes).zip(y) {
        let (mut best, mut arg) = (f32::NEG_INFINITY, 0);
        for (j, &v) in row.iter().enumerate() {
            if v > best {
                best = v;
                arg = j;
            }
        }
        if arg == label as usize {
            correct += 1;
        }
        let mut sum = 0.0f32;
        for v in row.iter_mut() {
            *v = (*v - best).exp();
            sum += *v;
        }
        for v in row.iter_mut() {
            *v /= sum;
        }
        loss -= (row[label as usize].max(1e-30) as f64).ln();
    }
    (loss, correct)
}

/// Evaluate in chunks so memory stays bounded for any test-set size.
pub(crate) fn eval_chunks(
    test: &Dataset,
    mut f: impl FnMut(&[f32], &[u32]) -> (f64, u32),
) -> Quality {
    const CHUNK: usize = 1000;
    let (mut loss, mut correct) = (0.0, 0u64);
    let mut start = 0;
    while start < test.n {
        let end = (start + CHUNK).min(test.n);
        let (l, c) = f(
            &test.x[start * test.dim..end * test.dim],
            &test.y[start..end],
        );
        loss += l;
        correct += c as u64;
        start = end;
    }
    Quality {
        accuracy: correct as f64 / test.n.max(1) as f64,
        loss: loss / test.n.max(1) as f64,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::data::SplitMix64;

    #[test]
    fn wire_ids_are_fixed_and_round_trip() {
        // The ids are the protocol's: changing one breaks every older peer.
        let ids: Vec<(u8, &str)> = ModelKind::ALL
            .iter()
            .map(|k| (k.wire_id(), k.name()))
            .collect();
        assert_eq!(ids, [(0, "logreg"), (1, "svm"), (2, "mlp"), (3, "kmeans")]);
        for k in ModelKind::ALL {
            assert_eq!(ModelKind::from_wire(k.wire_id()), Some(k));
            assert_eq!(ModelKind::from_name(k.name()), Some(k));
        }
        assert_eq!(ModelKind::from_wire(4), None);
        assert_eq!(ModelKind::from_name("resnet"), None);
        assert_eq!(MODELS.len(), ModelKind::ALL.len());
    }

    #[test]
    fn oversized_models_are_refused_before_allocating() {
        // 64 features, 10 classes: a hidden layer of 10^8 units is 7.4·10^9 parameters.
        let e = ModelSpec::new("mlp", 64, 10, 100_000_000)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("hidden:") && e.contains("parameters"), "{e}");
        // Wider than the handshake's u32.
        let e = ModelSpec::new("kmeans", 64, 10, 1 << 33)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("clusters:"), "{e}");
        let e = ModelSpec::new("logreg", 1 << 24, 1 << 8, 0)
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("model:"), "{e}");
        let ok = ModelSpec::new("mlp", 784, 10, 128).unwrap();
        assert_eq!(ok.n_params(), Some(ok.build().n_params() as u64));
        for name in MODELS {
            let s = ModelSpec::new(name, 5, 3, 4).unwrap();
            assert_eq!(s.n_params(), Some(s.build().n_params() as u64), "{name}");
        }
    }

    /// Central-difference check of `loss_grad` on a few coordinates.
    pub fn check_gradient(m: &dyn Model, d: &Dataset, seed: u64) {
        let mut p = m.init(seed, d);
        let mut rng = SplitMix64(seed);
        // move off the initial point so that ReLUs / hinges are not all at a kink
        for v in p.iter_mut() {
            *v += (rng.unit_f32() - 0.5) * 0.1;
        }
        let b = 16;
        let x = &d.x[..b * d.dim];
        let y = &d.y[..b];
        let mut g = vec![0.0; m.n_params()];
        m.loss_grad(&p, x, y, &mut g);
        let mut scratch = vec![0.0; m.n_params()];
        let h = 1e-3f32;
        let mut checked = 0;
        for _ in 0..40 {
            let i = (rng.next_u64() % p.len() as u64) as usize;
            let old = p[i];
            p[i] = old + h;
            let lp = m.loss_grad(&p, x, y, &mut scratch).loss_sum / b as f64;
            p[i] = old - h;
            let lm = m.loss_grad(&p, x, y, &mut scratch).loss_sum / b as f64;
            p[i] = old;
            let num = (lp - lm) / (2.0 * h as f64);
            let tol = 1e-3 + 0.05 * num.abs();
            assert!(
                (num - g[i] as f64).abs() <= tol,
                "{} param {i}: numeric {num} analytic {}",
                m.name(),
                g[i]
            );
            checked += 1;
        }
        assert_eq!(checked, 40);
    }

    #[test]
    fn gemm_matches_naive() {
        let (m, k, n) = (3, 4, 5);
        let a: Vec<f32> = (0..m * k).map(|i| i as f32 * 0.5 - 2.0).collect();
        let b: Vec<f32> = (0..k * n).map(|i| (i as f32).sin()).collect();
        let mut c = vec![0.0; m * n];
        gemm(m, k, n, 1.0, &a, false, &b, false, 0.0, &mut c);
        for i in 0..m {
            for j in 0..n {
                let s: f32 = (0..k).map(|t| a[i * k + t] * b[t * n + j]).sum();
                assert!((s - c[i * n + j]).abs() < 1e-4);
            }
        }
        // Aᵀ stored as k×m
        let at: Vec<f32> = (0..k * m).map(|idx| a[(idx % m) * k + idx / m]).collect();
        let mut c2 = vec![0.0; m * n];
        gemm(m, k, n, 1.0, &at, true, &b, false, 0.0, &mut c2);
        assert_eq!(c, c2);
    }

    #[test]
    fn unknown_model_is_named() {
        let e = ModelSpec::new("resnet", 4, 2, 8).unwrap_err().to_string();
        assert!(e.contains("model") && e.contains("resnet"), "{e}");
    }
}
