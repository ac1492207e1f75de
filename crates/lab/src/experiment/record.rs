//! Records job-quality profiles for the SLAQ experiment: real models trained
//! single-process on MNIST, loss per iteration and time per iteration at several
//! worker counts.
//!
//! Models: the runtime's logistic regression, linear SVM (Crammer–Singer), MLP and
//! mini-batch K-means ([`pacer_runtime::model`]), plus a least-squares linear
//! regression defined here (the digit's value regressed on the pixels). Each
//! variant (model × learning rate × batch) trains with synchronous mini-batch
//! SGD/Adam from a seeded initialisation over a seeded sample stream.
//!
//! - Loss: after every iteration, the training objective on a fixed, seeded
//!   subset of 2,000 training samples (the same samples for the whole run), so
//!   the curve is the job's quality, not mini-batch noise.
//! - Time per iteration on `w` workers (strong scaling: the global batch is split
//!   into `w` shards): each shard's gradient is computed for real and timed (one
//!   thread, the shards one after the other), the iteration's compute time is the
//!   slowest shard, plus the measured optimiser step, plus a modelled all-reduce
//!   of the parameters by recursive halving/doubling,
//!   `2·log2(w)·latency + 2(w−1)/w · 4P/bandwidth` with 10 Gb/s and 50 µs — the network is modelled, the compute is measured (each
//!   shard's best of 3 runs, as on a dedicated worker). The median over a few
//!   timed iterations is kept.
//! - The loss per iteration does not depend on `w` here (the same global batch
//!   is averaged whatever the split), so it is recorded once per variant.

use anyhow::{bail, Context, Result};
use pacer_runtime::data::{Dataset, SampleStream};
use pacer_runtime::model::{BatchStats, Model, ModelSpec, Quality};
use pacer_runtime::optim::{OptimSpec, Optimizer};
use pacer_sim::quality::QualityProfile;
use std::path::Path;
use std::time::Instant;

/// Worker counts the iteration time is measured at.
pub const WORKERS: &[u32] = &[1, 2, 4, 8, 16, 32];
const BANDWIDTH_BYTES_PER_S: f64 = 1.25e9;
const LATENCY_S: f64 = 50e-6;
const EVAL_SAMPLES: usize = 2000;
const TIMED_ITERATIONS: usize = 3;
/// Runs per shard; the fastest counts.
const REPEATS: usize = 3;

/// Least-squares linear regression of the class index on the features:
/// `loss = ½ (w·x + b − y)²`, parameters `[w (dim), b]`.
struct LinReg {
    dim: usize,
}

impl Model for LinReg {
    fn name(&self) -> &'static str {
        "linreg"
    }

    fn n_params(&self) -> usize {
        self.dim + 1
    }

    fn init(&self, _seed: u64, _train: &Dataset) -> Vec<f32> {
        vec![0.0; self.dim + 1]
    }

    fn loss_grad(&self, params: &[f32], x: &[f32], y: &[u32], grad: &mut [f32]) -> BatchStats {
        let d = self.dim;
        grad.iter_mut().for_each(|g| *g = 0.0);
        let mut loss = 0.0f64;
        for (row, &label) in x.chunks(d).zip(y) {
            let pred: f32 = row
                .iter()
                .zip(&params[..d])
                .map(|(a, b)| a * b)
                .sum::<f32>()
                + params[d];
            let r = pred - label as f32;
            loss += 0.5 * (r as f64) * (r as f64);
            for (g, &xi) in grad[..d].iter_mut().zip(row) {
                *g += r * xi;
            }
            grad[d] += r;
        }
        let n = y.len().max(1) as f32;
        grad.iter_mut().for_each(|g| *g /= n);
        BatchStats {
            loss_sum: loss,
            correct: 0,
        }
    }

    fn evaluate(&self, _params: &[f32], _train: &Dataset, _test: &Dataset) -> Quality {
        Quality::default()
    }

    fn default_optimizer(&self) -> OptimSpec {
        OptimSpec::Sgd {
            lr: 0.002,
            momentum: 0.9,
            weight_decay: 0.0,
        }
    }
}

/// One recorded training configuration.
#[derive(Debug, Clone, Copy)]
pub struct Variant {
    pub name: &'static str,
    pub model: &'static str,
    /// MLP hidden units or K-means clusters.
    pub width: usize,
    pub lr: f32,
    pub batch: usize,
    pub iterations: usize,
}

/// The recorded mix: five algorithms, two settings each. Batches are large
/// fractions of the data, as in Spark MLlib's mini-batch gradient descent (SLAQ's
/// jobs), so that data parallelism pays.
pub const VARIANTS: &[Variant] = &[
    Variant {
        name: "logreg-a",
        model: "logreg",
        width: 0,
        lr: 0.5,
        batch: 4096,
        iterations: 300,
    },
    Variant {
        name: "logreg-b",
        model: "logreg",
        width: 0,
        lr: 0.1,
        batch: 8192,
        iterations: 400,
    },
    Variant {
        name: "svm-a",
        model: "svm",
        width: 0,
        lr: 0.05,
        batch: 4096,
        iterations: 300,
    },
    Variant {
        name: "svm-b",
        model: "svm",
        width: 0,
        lr: 0.01,
        batch: 8192,
        iterations: 400,
    },
    Variant {
        name: "mlp-a",
        model: "mlp",
        width: 64,
        lr: 2e-3,
        batch: 2048,
        iterations: 300,
    },
    Variant {
        name: "mlp-b",
        model: "mlp",
        width: 32,
        lr: 5e-4,
        batch: 4096,
        iterations: 400,
    },
    Variant {
        name: "kmeans-a",
        model: "kmeans",
        width: 10,
        lr: 0.0,
        batch: 4096,
        iterations: 150,
    },
    Variant {
        name: "kmeans-b",
        model: "kmeans",
        width: 20,
        lr: 0.0,
        batch: 8192,
        iterations: 200,
    },
    Variant {
        name: "linreg-a",
        model: "linreg",
        width: 0,
        lr: 0.002,
        batch: 4096,
        iterations: 300,
    },
    Variant {
        name: "linreg-b",
        model: "linreg",
        width: 0,
        lr: 0.0005,
        batch: 8192,
        iterations: 400,
    },
];

fn build(v: &Variant, train: &Dataset) -> Result<(Box<dyn Model>, OptimSpec)> {
    let model: Box<dyn Model> = if v.model == "linreg" {
        Box::new(LinReg { dim: train.dim })
    } else {
        ModelSpec::new(v.model, train.dim, train.classes, v.width)?.build()
    };
    let spec = model.default_optimizer();
    let spec = if v.lr > 0.0 { spec.with_lr(v.lr) } else { spec };
    Ok((model, spec))
}

fn gather(d: &Dataset, idx: &[u32], x: &mut Vec<f32>, y: &mut Vec<u32>) {
    x.clear();
    y.clear();
    for &i in idx {
        x.extend_from_slice(d.row(i as usize));
        y.push(d.y[i as usize]);
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Trains one variant; returns its profile.
pub fn record_variant(v: &Variant, train: &Dataset, seed: u64) -> Result<QualityProfile> {
    let (model, spec) = build(v, train)?;
    let mut params = model.init(seed, train);
    let p = params.len();
    let mut grad = vec![0.0f32; p];
    let mut opt = Optimizer::new(spec, p);
    let eval_idx: Vec<u32> =
        SampleStream::permutation(train.n, seed ^ 0xE7A1, 0)[..EVAL_SAMPLES.min(train.n)].to_vec();
    let (mut xe, mut ye) = (Vec::new(), Vec::new());
    gather(train, &eval_idx, &mut xe, &mut ye);
    let mut scratch = vec![0.0f32; p];
    let mut eval = |params: &[f32]| -> f64 {
        model.loss_grad(params, &xe, &ye, &mut scratch).loss_sum / ye.len() as f64
    };
    let mut stream = SampleStream::new(train.n, seed);
    let (mut idx, mut xb, mut yb) = (Vec::new(), Vec::new(), Vec::new());
    // Timing per worker count, on the first batches (speed does not depend on the
    // parameter values for these models).
    let mut iter_time = Vec::new();
    for &w in WORKERS {
        let mut times = Vec::new();
        for t in 0..TIMED_ITERATIONS {
            stream.indices((t * v.batch) as u64, v.batch, &mut idx);
            gather(train, &idx, &mut xb, &mut yb);
            let mut slowest = 0.0f64;
            let shard = v.batch.div_ceil(w as usize);
            for s in 0..w as usize {
                let lo = (s * shard).min(v.batch);
                let hi = ((s + 1) * shard).min(v.batch);
                if lo >= hi {
                    continue;
                }
                // A worker's own compute time: the best of a few runs, so that
                // other processes on this machine do not count as its time.
                let mut best = f64::INFINITY;
                for _ in 0..REPEATS {
                    let t0 = Instant::now();
                    model.loss_grad(
                        &params,
                        &xb[lo * train.dim..hi * train.dim],
                        &yb[lo..hi],
                        &mut grad,
                    );
                    best = best.min(t0.elapsed().as_secs_f64());
                }
                slowest = slowest.max(best);
            }
            let mut probe = params.clone();
            let mut probe_opt = Optimizer::new(spec, p);
            let t0 = Instant::now();
            probe_opt.step(&mut probe, &grad);
            let step = t0.elapsed().as_secs_f64();
            // All-reduce by recursive halving/doubling (Rabenseifner): 2·log2(w)
            // message latencies and 2(w−1)/w of the parameters over the link.
            let comm = if w > 1 {
                2.0 * (w as f64).log2() * LATENCY_S
                    + 2.0 * (w - 1) as f64 / w as f64 * 4.0 * p as f64 / BANDWIDTH_BYTES_PER_S
            } else {
                0.0
            };
            times.push(slowest + step + comm);
        }
        iter_time.push((w, median(times)));
    }
    // Training, loss after every iteration.
    let mut curve = vec![(0.0, eval(&params))];
    for k in 0..v.iterations {
        stream.indices((k * v.batch) as u64, v.batch, &mut idx);
        gather(train, &idx, &mut xb, &mut yb);
        model.loss_grad(&params, &xb, &yb, &mut grad);
        opt.step(&mut params, &grad);
        let loss = eval(&params);
        if !loss.is_finite() {
            bail!("{}: loss diverged at iteration {}", v.name, k + 1);
        }
        curve.push(((k + 1) as f64, loss));
    }
    Ok(QualityProfile {
        name: v.name.to_string(),
        meta: vec![
            ("algorithm".into(), v.model.into()),
            ("dataset".into(), "mnist".into()),
            ("batch".into(), v.batch.to_string()),
            ("lr".into(), format!("{}", spec.lr())),
            ("width".into(), v.width.to_string()),
            ("seed".into(), seed.to_string()),
        ],
        curve,
        iter_time,
    })
}

/// Records every variant on the MNIST files in `data_dir` into `out_dir/<name>.csv`.
pub fn record_all(data_dir: &Path, out_dir: &Path, seed: u64) -> Result<Vec<QualityProfile>> {
    if !data_dir.join("train-images-idx3-ubyte.gz").exists()
        && !data_dir.join("train-images-idx3-ubyte").exists()
    {
        bail!(
            "MNIST not found in {} (expected train-images-idx3-ubyte[.gz] there; the shared \
             data folder ../shared/data/mnist has it); pass --mnist DIR",
            data_dir.display()
        );
    }
    let data = pacer_runtime::data::load(&format!("mnist:{}", data_dir.display()))
        .with_context(|| format!("loading MNIST from {}", data_dir.display()))?;
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let mut out = Vec::new();
    for v in VARIANTS {
        let t0 = Instant::now();
        let prof = record_variant(v, &data.train, seed)?;
        let path = out_dir.join(format!("{}.csv", v.name));
        pacer_cli::out::write_bytes(&path, prof.to_csv())?;
        eprintln!(
            "recorded {:<9} loss {:.4} → {:.4} in {} iterations; {:.2} ms/iter on 1 worker, {:.2} on 32 ({:.1} s)",
            v.name,
            prof.initial_loss(),
            prof.final_loss(),
            v.iterations,
            prof.iter_time[0].1 * 1e3,
            prof.iter_time.last().map_or(0.0, |t| t.1 * 1e3),
            t0.elapsed().as_secs_f64()
        );
        out.push(prof);
    }
    Ok(out)
}
