//! Gaussian mixtures with full covariances, fitted by expectation-maximisation,
//! with the number of components chosen by BIC and soft membership: how RAPTOR
//! (and ILM-TR after it) clusters reduced embeddings.
//!
//! Written here rather than taken from a crate: linfa-clustering's mixture needs
//! ndarray-linalg (a LAPACK build) and fits one k at a time on one core; RAPTOR
//! sweeps k = 1..50 per level. Points are one flat row-major `f64` buffer; the E
//! and M steps run over fixed-size chunks in parallel and their partial sums are
//! added in chunk order, so a fit is the same bit for bit on any number of threads;
//! their kernels run on the widest vectors the CPU has, lane by lane in the scalar
//! order, so it is also the same on any CPU.

use pulp::{Simd, WithSimd};
use rayon::prelude::*;

/// Points per parallel chunk. Fixed, so sums never depend on the thread count.
const CHUNK: usize = 512;
/// Responsibilities at or below this are left out of the M step's sums: next to
/// a component's weight of at least a few points they change nothing.
const NEGLIGIBLE: f64 = 1e-10;
/// Added to every covariance diagonal, as scikit-learn's `reg_covar`: keeps a
/// component on a few identical points invertible.
const REG_COVAR: f64 = 1e-6;

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MixtureConfig {
    /// Largest number of components BIC may choose (RAPTOR: 50).
    pub max_components: usize,
    /// A point belongs to every component whose posterior exceeds this (RAPTOR: 0.1).
    pub threshold: f64,
    pub max_iterations: usize,
    /// EM stops when the mean log-likelihood per point gains less than this.
    pub tolerance: f64,
    /// Above this many points, k is chosen on an evenly spaced sample of this size
    /// and only the chosen k is fitted on all points.
    pub selection_sample: usize,
    pub seed: u64,
}

impl Default for MixtureConfig {
    fn default() -> Self {
        MixtureConfig {
            max_components: 50,
            threshold: 0.1,
            max_iterations: 100,
            tolerance: 1e-3,
            selection_sample: 10_000,
            seed: 224,
        }
    }
}

/// Row-major points: `n` rows of `dim` values.
#[derive(Debug, Clone, PartialEq)]
pub struct Points {
    values: Vec<f64>,
    dim: usize,
}

impl Points {
    pub fn new(values: Vec<f64>, dim: usize) -> Self {
        assert!(
            dim > 0 && values.len().is_multiple_of(dim),
            "{} values do not make rows of {dim}",
            values.len()
        );
        Points { values, dim }
    }

    pub fn len(&self) -> usize {
        self.values.len() / self.dim
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    pub fn dim(&self) -> usize {
        self.dim
    }

    pub fn row(&self, i: usize) -> &[f64] {
        &self.values[i * self.dim..(i + 1) * self.dim]
    }

    /// `size` distinct rows drawn at random (seeded), in their original order: an
    /// evenly spaced pick would alias with any period in the input's order.
    fn sample(&self, size: usize, seed: u64) -> Points {
        let mut random = SplitMix64(seed);
        let mut rows: Vec<usize> = (0..self.len()).collect();
        for i in 0..size {
            let j = i + random.below(rows.len() - i);
            rows.swap(i, j);
        }
        let mut chosen = rows[..size].to_vec();
        chosen.sort_unstable();
        let values = chosen
            .into_iter()
            .flat_map(|i| self.row(i).iter().copied())
            .collect();
        Points::new(values, self.dim)
    }

    fn chunks(&self) -> impl IndexedParallelIterator<Item = &[f64]> {
        self.values.par_chunks(CHUNK * self.dim)
    }
}

/// One fitted component: weight, mean, and its covariance as the upper-triangular
/// P with covariance⁻¹ = P Pᵀ (scikit-learn's "precision Cholesky"): the
/// Mahalanobis distance of x is then |xᵀP − μᵀP|², a product whose inner loop
/// runs over contiguous memory and vectorises, unlike a triangular solve.
#[derive(Debug, Clone, PartialEq)]
struct Component {
    weight: f64,
    mean: Vec<f64>,
    /// Row-major d × d, zero below the diagonal.
    precision: Vec<f64>,
    /// μᵀP.
    shift: Vec<f64>,
    /// ln weight + ln det P − d/2 ln 2π: the constant of the weighted log density.
    log_constant: f64,
}

impl Component {
    /// ln(weight · density) of point `point` of a transposed block (`xt[i * m +
    /// p]` is coordinate i of point p), in the order of operations of one lane of
    /// `Densities`.
    fn log_weighted_density_of(&self, xt: &[f64], m: usize, point: usize) -> f64 {
        let d = self.mean.len();
        let mut distance = 0.0;
        for j in 0..d {
            let mut z = -self.shift[j];
            for i in 0..=j {
                z += self.precision[i * d + j] * xt[i * m + point];
            }
            distance += z * z;
        }
        self.log_constant - 0.5 * distance
    }
}

/// ln(weight · density) of every point of a transposed block, into `out`. Run
/// inside `Posteriors`, so compiled for the widest vectors the CPU has (`pulp`
/// picks AVX2 on x86-64 at run time; a portable build may assume only SSE2). `VECTORS` vectors of points at a time: zⱼ = Σᵢ xᵢ Pᵢⱼ − (μᵀP)ⱼ and the
/// running |z|² stay in registers while the precision is walked once. Separate
/// multiplies and adds in one fixed order per point, never fused: the same bits
/// whatever the vector width, so fits agree across machines.
/// Vectors of points in flight in `Densities`: four independent chains of adds
/// hide the adder's latency.
const VECTORS: usize = 4;

struct Densities<'a> {
    component: &'a Component,
    xt: &'a [f64],
    m: usize,
    out: &'a mut [f64],
}

impl WithSimd for Densities<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        let Densities {
            component,
            xt,
            m,
            out,
        } = self;
        let d = component.mean.len();
        let tile = VECTORS * S::F64_LANES;
        let body = m - m % tile;
        let constant = simd.splat_f64s(component.log_constant);
        let half = simd.splat_f64s(0.5);
        for first in (0..body).step_by(tile) {
            let mut distance = [simd.splat_f64s(0.0); VECTORS];
            for j in 0..d {
                let mut z = [simd.splat_f64s(-component.shift[j]); VECTORS];
                for i in 0..=j {
                    let p = simd.splat_f64s(component.precision[i * d + j]);
                    let (x, _) = S::as_simd_f64s(&xt[i * m + first..i * m + first + tile]);
                    for (zv, xv) in z.iter_mut().zip(x) {
                        *zv = simd.add_f64s(*zv, simd.mul_f64s(p, *xv));
                    }
                }
                for (dv, zv) in distance.iter_mut().zip(&z) {
                    *dv = simd.add_f64s(*dv, simd.mul_f64s(*zv, *zv));
                }
            }
            let (o, _) = S::as_mut_simd_f64s(&mut out[first..first + tile]);
            for (ov, dv) in o.iter_mut().zip(&distance) {
                *ov = simd.sub_f64s(constant, simd.mul_f64s(half, *dv));
            }
        }
        for (point, o) in out.iter_mut().enumerate().take(m).skip(body) {
            *o = component.log_weighted_density_of(xt, m, point);
        }
    }
}

/// A chunk of points transposed, so the inner loops run over points.
struct Block {
    xt: Vec<f64>,
    m: usize,
}

impl Block {
    fn of(chunk: &[f64], d: usize) -> Block {
        let m = chunk.len() / d;
        let mut xt = vec![0.0; chunk.len()];
        for (p, x) in chunk.chunks_exact(d).enumerate() {
            for (i, v) in x.iter().enumerate() {
                xt[i * m + p] = *v;
            }
        }
        Block { xt, m }
    }

    fn coordinate(&self, i: usize) -> &[f64] {
        &self.xt[i * self.m..(i + 1) * self.m]
    }

    /// Adds responsibilities `r` (component-major, k × m) to the M step's sums.
    /// Most points of a chunk have next to no responsibility for a given
    /// component once clusters separate: those under `NEGLIGIBLE` are left out,
    /// and when most are, the rest are gathered first so the sums run over them
    /// alone.
    fn accumulate(&self, r: &[f64], sums: &mut Sums) {
        pulp::Arch::new().dispatch(Moments {
            block: self,
            r,
            sums,
        });
    }

    #[inline(always)]
    fn accumulate_with<S: Simd>(&self, simd: S, r: &[f64], sums: &mut Sums) {
        let (m, d) = (self.m, self.xt.len() / self.m.max(1));
        let mut weighted = Vec::with_capacity(m);
        let mut gathered: Vec<f64> = Vec::with_capacity(d * m);
        for (c, rc) in r.chunks_exact(m).enumerate() {
            let active: Vec<usize> = (0..m).filter(|&p| rc[p] > NEGLIGIBLE).collect();
            if active.is_empty() {
                continue;
            }
            let (responsibilities, coordinates, n): (Vec<f64>, &[f64], usize) =
                if active.len() * 2 < m {
                    gathered.clear();
                    for i in 0..d {
                        let xi = self.coordinate(i);
                        gathered.extend(active.iter().map(|&p| xi[p]));
                    }
                    (
                        active.iter().map(|&p| rc[p]).collect(),
                        &gathered,
                        active.len(),
                    )
                } else {
                    let kept = rc.iter().map(|&v| if v > NEGLIGIBLE { v } else { 0.0 });
                    (kept.collect(), &self.xt, m)
                };
            sums.weight[c] += sum(simd, &responsibilities);
            for i in 0..d {
                let xi = &coordinates[i * n..(i + 1) * n];
                weighted.clear();
                weighted.extend(responsibilities.iter().zip(xi).map(|(r, x)| r * x));
                sums.first[c * d + i] += sum(simd, &weighted);
                for j in 0..=i {
                    let xj = &coordinates[j * n..(j + 1) * n];
                    sums.second[c * d * d + i * d + j] += dot(simd, &weighted, xj);
                }
            }
        }
    }
}

/// `GaussianMixture::posteriors` compiled for the widest vectors the CPU has.
struct Posteriors<'a> {
    mixture: &'a GaussianMixture,
    block: &'a Block,
}

impl WithSimd for Posteriors<'_> {
    type Output = (Vec<f64>, Vec<f64>);

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) -> Self::Output {
        self.mixture.posteriors_with(simd, self.block)
    }
}

/// eˣ for x ≤ 0, every lane the same whatever the vector width, where libm's
/// `exp` is one call per value. x = n ln 2 + r with |r| ≤ ln 2 / 2 (Cody and
/// Waite's two-part ln 2 keeps r exact), eʳ by its Taylor series to r¹³ (error
/// under 10⁻¹⁷), times 2ⁿ built in the exponent bits. Below −708 the result
/// would leave the normal range; it is 0 there, which no posterior or
/// log-likelihood here can tell from e⁻⁷⁰⁸.
#[inline(always)]
fn exp_nonpositive<S: Simd>(simd: S, x: S::f64s) -> S::f64s {
    /// 1.5 · 2⁵²: adding it rounds to an integer, which lands in the low bits.
    const SHIFTER: f64 = 6_755_399_441_055_744.0;
    // ln 2 in two parts (fdlibm's): the first has 32 significant bits, so n times
    // it is exact for every n here.
    const LN2_HI: f64 = f64::from_bits(0x3fe6_2e42_fee0_0000);
    const LN2_LO: f64 = f64::from_bits(0x3dea_39ef_3579_3c76);
    const UNDERFLOW: f64 = -708.0;
    let splat = |v: f64| simd.splat_f64s(v);
    let clamped = simd.max_f64s(x, splat(UNDERFLOW));
    let shifted = simd.add_f64s(
        simd.mul_f64s(clamped, splat(std::f64::consts::LOG2_E)),
        splat(SHIFTER),
    );
    let n = simd.sub_f64s(shifted, splat(SHIFTER));
    let r = simd.sub_f64s(
        simd.sub_f64s(clamped, simd.mul_f64s(n, splat(LN2_HI))),
        simd.mul_f64s(n, splat(LN2_LO)),
    );
    let mut series = splat(TAYLOR[TAYLOR.len() - 1]);
    for c in TAYLOR[..TAYLOR.len() - 1].iter().rev() {
        series = simd.add_f64s(simd.mul_f64s(series, r), splat(*c));
    }
    // n + 1023 (never below 1 after the clamp), shifted into the exponent field.
    let biased = simd.sub_u64s(
        simd.transmute_u64s_f64s(shifted),
        simd.splat_u64s(SHIFTER.to_bits() - 1023),
    );
    let two_to_n = simd.transmute_f64s_u64s(simd.mul_u64s(biased, simd.splat_u64s(1 << 52)));
    simd.select_f64s(
        simd.less_than_f64s(x, splat(UNDERFLOW)),
        splat(0.0),
        simd.mul_f64s(series, two_to_n),
    )
}

/// 1/k! for k = 0..=13.
const TAYLOR: [f64; 14] = {
    let mut c = [1.0; 14];
    let mut k = 1;
    while k < c.len() {
        c[k] = c[k - 1] / k as f64;
        k += 1;
    }
    c
};

/// `Block::accumulate` compiled for the widest vectors the CPU has; its sums
/// run lane by lane in one fixed order (see `dot`), so the width changes no bit.
struct Moments<'a> {
    block: &'a Block,
    r: &'a [f64],
    sums: &'a mut Sums,
}

impl WithSimd for Moments<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        self.block.accumulate_with(simd, self.r, self.sums);
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct GaussianMixture {
    components: Vec<Component>,
    dim: usize,
}

/// Per-chunk sums for the M step.
struct Sums {
    /// Σ r_ik per component.
    weight: Vec<f64>,
    /// Σ r_ik x_i, k × d.
    first: Vec<f64>,
    /// Σ r_ik x_i x_iᵀ (lower triangle used), k × d × d.
    second: Vec<f64>,
    log_likelihood: f64,
}

impl Sums {
    fn zero(k: usize, d: usize) -> Self {
        Sums {
            weight: vec![0.0; k],
            first: vec![0.0; k * d],
            second: vec![0.0; k * d * d],
            log_likelihood: 0.0,
        }
    }

    fn add(mut self, other: &Sums) -> Self {
        for (a, b) in self.weight.iter_mut().zip(&other.weight) {
            *a += b;
        }
        for (a, b) in self.first.iter_mut().zip(&other.first) {
            *a += b;
        }
        for (a, b) in self.second.iter_mut().zip(&other.second) {
            *a += b;
        }
        self.log_likelihood += other.log_likelihood;
        self
    }
}

impl GaussianMixture {
    /// Fits `k` components by EM from a k-means++ start.
    pub fn fit(points: &Points, k: usize, config: &MixtureConfig) -> GaussianMixture {
        assert!(
            k >= 1 && k <= points.len(),
            "{k} components for {} points",
            points.len()
        );
        let d = points.dim();
        let seeds = kmeans_plus_plus(points, k, config.seed);
        // Start from hard assignments to the nearest seed.
        let sums = points
            .chunks()
            .map(|chunk| {
                let block = Block::of(chunk, d);
                let mut r = vec![0.0; k * block.m];
                for (p, x) in chunk.chunks_exact(d).enumerate() {
                    let nearest = (0..k)
                        .min_by(|&a, &b| {
                            squared_distance(x, &seeds[a])
                                .total_cmp(&squared_distance(x, &seeds[b]))
                        })
                        .expect("k ≥ 1");
                    r[nearest * block.m + p] = 1.0;
                }
                let mut sums = Sums::zero(k, d);
                block.accumulate(&r, &mut sums);
                sums
            })
            .collect::<Vec<_>>();
        let mut mixture = GaussianMixture::from_sums(&total(&sums, k, d), points.len(), d);
        let mut previous = f64::NEG_INFINITY;
        for _ in 0..config.max_iterations {
            let sums = mixture.expectation(points);
            let mean_log_likelihood = sums.log_likelihood / points.len() as f64;
            mixture = GaussianMixture::from_sums(&sums, points.len(), d);
            if (mean_log_likelihood - previous).abs() < config.tolerance {
                break;
            }
            previous = mean_log_likelihood;
        }
        mixture
    }

    /// The E step's sums under the current parameters (and the log-likelihood).
    fn expectation(&self, points: &Points) -> Sums {
        let (k, d) = (self.components.len(), self.dim);
        let partial = points
            .chunks()
            .map(|chunk| {
                let block = Block::of(chunk, d);
                let (posteriors, log_totals) = self.posteriors(&block);
                let mut sums = Sums::zero(k, d);
                block.accumulate(&posteriors, &mut sums);
                sums.log_likelihood = log_totals.iter().sum();
                sums
            })
            .collect::<Vec<_>>();
        total(&partial, k, d)
    }

    /// Posteriors of every component for every point of a block (component-major,
    /// k × m), and each point's log-likelihood. One `exp` per pair: it is most of
    /// the E step's time.
    fn posteriors(&self, block: &Block) -> (Vec<f64>, Vec<f64>) {
        pulp::Arch::new().dispatch(Posteriors {
            mixture: self,
            block,
        })
    }

    #[inline(always)]
    fn posteriors_with<S: Simd>(&self, simd: S, block: &Block) -> (Vec<f64>, Vec<f64>) {
        let m = block.m;
        let mut log_p = vec![0.0; self.components.len() * m];
        for (component, out) in self.components.iter().zip(log_p.chunks_exact_mut(m)) {
            Densities {
                component,
                xt: &block.xt,
                m,
                out,
            }
            .with_simd(simd);
        }
        let mut log_totals = vec![f64::NEG_INFINITY; m];
        for lp in log_p.chunks_exact(m) {
            for (max, v) in log_totals.iter_mut().zip(lp) {
                *max = max.max(*v);
            }
        }
        let mut sum_exp = vec![0.0; m];
        for lp in log_p.chunks_exact_mut(m) {
            let (v_body, v_tail) = S::as_mut_simd_f64s(lp);
            let (s_body, s_tail) = S::as_mut_simd_f64s(&mut sum_exp);
            let (max_body, max_tail) = S::as_simd_f64s(&log_totals);
            for ((v, s), max) in v_body.iter_mut().zip(s_body).zip(max_body) {
                *v = exp_nonpositive(simd, simd.sub_f64s(*v, *max));
                *s = simd.add_f64s(*s, *v);
            }
            for ((v, s), max) in v_tail.iter_mut().zip(s_tail).zip(max_tail) {
                *v = exp_nonpositive(pulp::Scalar::new(), *v - max);
                *s += *v;
            }
        }
        for lp in log_p.chunks_exact_mut(m) {
            for (v, s) in lp.iter_mut().zip(&sum_exp) {
                *v /= s;
            }
        }
        for (total, s) in log_totals.iter_mut().zip(&sum_exp) {
            *total += s.ln();
        }
        (log_p, log_totals)
    }

    /// The M step: parameters from the responsibilities' sums.
    fn from_sums(sums: &Sums, n: usize, d: usize) -> GaussianMixture {
        let components = (0..sums.weight.len())
            .map(|c| {
                let nk = sums.weight[c] + 10.0 * f64::EPSILON;
                let mean: Vec<f64> = sums.first[c * d..(c + 1) * d]
                    .iter()
                    .map(|s| s / nk)
                    .collect();
                let mut covariance = vec![0.0; d * d];
                for i in 0..d {
                    for j in 0..=i {
                        let v = sums.second[c * d * d + i * d + j] / nk - mean[i] * mean[j];
                        covariance[i * d + j] = v;
                        covariance[j * d + i] = v;
                    }
                    covariance[i * d + i] += REG_COVAR;
                }
                let precision = precision_cholesky(&cholesky(&covariance, d), d);
                let log_det_precision: f64 = (0..d).map(|i| precision[i * d + i].ln()).sum();
                let shift = (0..d)
                    .map(|j| (0..=j).map(|i| mean[i] * precision[i * d + j]).sum())
                    .collect();
                let weight = nk / n as f64;
                Component {
                    weight,
                    log_constant: weight.ln() + log_det_precision
                        - 0.5 * d as f64 * (2.0 * std::f64::consts::PI).ln(),
                    mean,
                    precision,
                    shift,
                }
            })
            .collect();
        GaussianMixture { components, dim: d }
    }

    /// Total log-likelihood of `points`.
    pub fn log_likelihood(&self, points: &Points) -> f64 {
        points
            .chunks()
            .map(|chunk| self.posteriors(&Block::of(chunk, self.dim)).1.iter().sum())
            .collect::<Vec<f64>>()
            .into_iter()
            .sum()
    }

    /// Free parameters: weights, means and full covariances.
    fn parameters(&self) -> usize {
        let (k, d) = (self.components.len(), self.dim);
        (k - 1) + k * d + k * d * (d + 1) / 2
    }

    /// Bayesian information criterion (lower is better), as scikit-learn computes it.
    pub fn bic(&self, points: &Points) -> f64 {
        -2.0 * self.log_likelihood(points) + self.parameters() as f64 * (points.len() as f64).ln()
    }

    /// For each point, the components whose posterior exceeds `threshold`, most
    /// likely first; a point no component passes goes to its most likely one.
    pub fn memberships(&self, points: &Points, threshold: f64) -> Vec<Vec<usize>> {
        points
            .chunks()
            .flat_map_iter(|chunk| {
                let block = Block::of(chunk, self.dim);
                let (posteriors, _) = self.posteriors(&block);
                (0..block.m)
                    .map(|p| {
                        let mut ranked: Vec<(usize, f64)> = posteriors
                            .chunks_exact(block.m)
                            .map(|r| r[p])
                            .enumerate()
                            .collect();
                        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
                        let passing: Vec<usize> = ranked
                            .iter()
                            .take_while(|(_, r)| *r > threshold)
                            .map(|(c, _)| *c)
                            .collect();
                        if passing.is_empty() {
                            vec![ranked[0].0]
                        } else {
                            passing
                        }
                    })
                    .collect::<Vec<_>>()
            })
            .collect()
    }
}

/// The clusters of a set of points.
#[derive(Debug, Clone, PartialEq)]
pub struct Clustering {
    pub components: usize,
    /// Per point, the clusters it belongs to.
    pub memberships: Vec<Vec<usize>>,
    /// BIC of every k tried, in order from k = 1.
    pub bic: Vec<f64>,
}

/// RAPTOR's clustering: a mixture for every k from 1 to the maximum (no more
/// than points, the fits in parallel), the k of lowest BIC, and soft memberships
/// above the threshold.
pub fn cluster(points: &Points, config: &MixtureConfig) -> Clustering {
    if points.len() <= 1 {
        return Clustering {
            components: points.len(),
            memberships: vec![vec![0]; points.len()],
            bic: Vec::new(),
        };
    }
    let sample;
    let selecting = if points.len() > config.selection_sample {
        sample = points.sample(config.selection_sample, config.seed);
        &sample
    } else {
        points
    };
    let ks = 1..=config.max_components.min(selecting.len());
    let fits: Vec<(usize, f64, GaussianMixture)> = ks
        .into_par_iter()
        .map(|k| {
            let mixture = GaussianMixture::fit(selecting, k, config);
            (k, mixture.bic(selecting), mixture)
        })
        .collect();
    let bic: Vec<f64> = fits.iter().map(|f| f.1).collect();
    let (k, _, mixture) = fits
        .into_iter()
        .min_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)))
        .expect("at least one k");
    let mixture = if std::ptr::eq(selecting, points) {
        mixture
    } else {
        GaussianMixture::fit(points, k, config)
    };
    Clustering {
        components: k,
        memberships: mixture.memberships(points, config.threshold),
        bic,
    }
}

/// Lanes of the sums below: eight independent running sums, in vector registers
/// (two of AVX2's four doubles, four of SSE2's two), where one running sum would
/// wait on each addition in turn.
const LANES: usize = 8;

/// Σ a·b in one fixed order whatever the vector width: lane l sums the products
/// at l, l + 8, l + 16…; then the lanes in order, then the tail.
#[inline(always)]
fn dot<S: Simd>(simd: S, a: &[f64], b: &[f64]) -> f64 {
    let vectors = LANES / S::F64_LANES;
    let mut lanes = [simd.splat_f64s(0.0); LANES];
    let (a_body, a_tail) = pulp::as_arrays::<LANES, _>(a);
    let (b_body, b_tail) = pulp::as_arrays::<LANES, _>(b);
    for (x, y) in a_body.iter().zip(b_body) {
        let (x, _) = S::as_simd_f64s(x);
        let (y, _) = S::as_simd_f64s(y);
        for v in 0..vectors {
            lanes[v] = simd.add_f64s(lanes[v], simd.mul_f64s(x[v], y[v]));
        }
    }
    let tail: f64 = a_tail.iter().zip(b_tail).map(|(x, y)| x * y).sum();
    in_order::<S>(&lanes[..vectors]) + tail
}

/// Σ a, in the same fixed order as `dot`.
#[inline(always)]
fn sum<S: Simd>(simd: S, a: &[f64]) -> f64 {
    let vectors = LANES / S::F64_LANES;
    let mut lanes = [simd.splat_f64s(0.0); LANES];
    let (body, tail) = pulp::as_arrays::<LANES, _>(a);
    for x in body {
        let (x, _) = S::as_simd_f64s(x);
        for v in 0..vectors {
            lanes[v] = simd.add_f64s(lanes[v], x[v]);
        }
    }
    in_order::<S>(&lanes[..vectors]) + tail.iter().sum::<f64>()
}

/// The lanes' sum, lane 0 first.
#[inline(always)]
fn in_order<S: Simd>(lanes: &[S::f64s]) -> f64 {
    pulp::bytemuck::cast_slice::<S::f64s, f64>(lanes)
        .iter()
        .sum()
}

/// Adds per-chunk sums in chunk order.
fn total(partial: &[Sums], k: usize, d: usize) -> Sums {
    partial
        .iter()
        .fold(Sums::zero(k, d), |acc, sums| acc.add(sums))
}

fn squared_distance(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

/// Cholesky factor of a symmetric positive-definite matrix; a pivot that is not
/// positive (a degenerate component) is replaced by a tiny one.
fn cholesky(matrix: &[f64], d: usize) -> Vec<f64> {
    let mut l = vec![0.0; d * d];
    for i in 0..d {
        for j in 0..=i {
            let dot: f64 = (0..j).map(|m| l[i * d + m] * l[j * d + m]).sum();
            if i == j {
                l[i * d + i] = (matrix[i * d + i] - dot).max(REG_COVAR).sqrt();
            } else {
                l[i * d + j] = (matrix[i * d + j] - dot) / l[j * d + j];
            }
        }
    }
    l
}

/// P = (L⁻¹)ᵀ for the lower-triangular Cholesky factor L of a covariance, so that
/// covariance⁻¹ = P Pᵀ; P is upper-triangular.
fn precision_cholesky(l: &[f64], d: usize) -> Vec<f64> {
    // Forward substitution for each column of L⁻¹ (lower-triangular).
    let mut inverse = vec![0.0; d * d];
    for col in 0..d {
        for i in col..d {
            let identity = if i == col { 1.0 } else { 0.0 };
            let dot: f64 = (col..i).map(|m| l[i * d + m] * inverse[m * d + col]).sum();
            inverse[i * d + col] = (identity - dot) / l[i * d + i];
        }
    }
    let mut p = vec![0.0; d * d];
    for i in 0..d {
        for j in 0..=i {
            p[j * d + i] = inverse[i * d + j];
        }
    }
    p
}

/// k-means++ seeds: the first point at random, each next one drawn with
/// probability proportional to its squared distance from the nearest seed so far.
fn kmeans_plus_plus(points: &Points, k: usize, seed: u64) -> Vec<Vec<f64>> {
    let mut random = SplitMix64(seed);
    let n = points.len();
    let mut seeds = vec![points.row(random.below(n)).to_vec()];
    let mut nearest: Vec<f64> = (0..n)
        .map(|i| squared_distance(points.row(i), &seeds[0]))
        .collect();
    while seeds.len() < k {
        let total: f64 = nearest.iter().sum();
        let next = if total > 0.0 {
            let mut target = random.unit() * total;
            nearest
                .iter()
                .position(|&w| {
                    target -= w;
                    target < 0.0
                })
                .unwrap_or(n - 1)
        } else {
            random.below(n)
        };
        let chosen = points.row(next).to_vec();
        for (i, w) in nearest.iter_mut().enumerate() {
            *w = w.min(squared_distance(points.row(i), &chosen));
        }
        seeds.push(chosen);
    }
    seeds
}

/// A small seeded generator, so fits are reproducible without a dependency.
/// A small deterministic generator: the same numbers on every machine.
pub(crate) struct SplitMix64(pub(crate) u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub(crate) fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    fn below(&mut self, n: usize) -> usize {
        ((self.unit() * n as f64) as usize).min(n - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `per` points around each centre, spread deterministically.
    fn blobs(centres: &[[f64; 2]], per: usize, spread: f64) -> Points {
        let mut random = SplitMix64(7);
        let mut values = Vec::new();
        for centre in centres {
            for _ in 0..per {
                // Sum of uniforms: roughly normal.
                let mut normal = || (0..6).map(|_| random.unit()).sum::<f64>() - 3.0;
                values.push(centre[0] + spread * normal());
                values.push(centre[1] + spread * normal());
            }
        }
        Points::new(values, 2)
    }

    #[test]
    fn bic_finds_the_number_of_separated_blobs() {
        let points = blobs(
            &[[0.0, 0.0], [10.0, 0.0], [0.0, 10.0], [10.0, 10.0]],
            60,
            1.0,
        );
        let config = MixtureConfig {
            max_components: 8,
            ..MixtureConfig::default()
        };
        let clustering = cluster(&points, &config);
        assert_eq!(clustering.components, 4, "BIC per k: {:?}", clustering.bic);
        // Each blob lands in one cluster of its own.
        for blob in 0..4 {
            let first = &clustering.memberships[blob * 60];
            assert_eq!(first.len(), 1);
            assert!(
                clustering.memberships[blob * 60..(blob + 1) * 60]
                    .iter()
                    .all(|m| m == first)
            );
        }
    }

    #[test]
    fn em_recovers_means_and_weights() {
        let points = blobs(&[[-5.0, 1.0], [5.0, -1.0]], 200, 0.5);
        let mixture = GaussianMixture::fit(&points, 2, &MixtureConfig::default());
        let mut means: Vec<(f64, f64, f64)> = mixture
            .components
            .iter()
            .map(|c| (c.mean[0], c.mean[1], c.weight))
            .collect();
        means.sort_by(|a, b| a.0.total_cmp(&b.0));
        for ((x, y, w), (ex, ey)) in means.iter().zip([(-5.0, 1.0), (5.0, -1.0)]) {
            assert!((x - ex).abs() < 0.2 && (y - ey).abs() < 0.2, "{means:?}");
            assert!((w - 0.5).abs() < 1e-6, "{means:?}");
        }
        // EM never lowers the likelihood of a fit below that of its one-component fit.
        let one = GaussianMixture::fit(&points, 1, &MixtureConfig::default());
        assert!(mixture.log_likelihood(&points) > one.log_likelihood(&points));
    }

    #[test]
    fn a_point_between_two_blobs_belongs_to_both() {
        let mut points = blobs(&[[-2.5, 0.0], [2.5, 0.0]], 100, 1.5);
        points.values.extend([0.0, 0.0]);
        let mixture = GaussianMixture::fit(&points, 2, &MixtureConfig::default());
        let memberships = mixture.memberships(&points, 0.1);
        let mut middle = memberships[200].clone();
        middle.sort_unstable();
        assert_eq!(middle, vec![0, 1]);
        // Points deep in one blob belong to it alone.
        let alone = |i: usize| memberships[i].len() == 1;
        assert!(
            (0..200)
                .filter(|&i| points.row(i)[0].abs() > 2.5)
                .all(alone)
        );
    }

    #[test]
    fn memberships_are_the_components_over_the_threshold_or_the_likeliest() {
        let points = blobs(&[[0.0, 0.0], [3.0, 0.0], [1.5, 2.5]], 80, 1.2);
        let mixture = GaussianMixture::fit(&points, 3, &MixtureConfig::default());
        let threshold = 0.1;
        let memberships = mixture.memberships(&points, threshold);
        let block = Block::of(&points.values, 2);
        let (posteriors, _) = mixture.posteriors(&block);
        let posterior = |c: usize, p: usize| posteriors[c * block.m + p];
        let mut soft = 0;
        for (p, members) in memberships.iter().enumerate() {
            let mut over: Vec<usize> = (0..3).filter(|&c| posterior(c, p) > threshold).collect();
            if over.is_empty() {
                let likeliest = (0..3)
                    .max_by(|&a, &b| posterior(a, p).total_cmp(&posterior(b, p)))
                    .expect("three components");
                over.push(likeliest);
            }
            let mut got = members.clone();
            got.sort_unstable();
            assert_eq!(got, over, "point {p}");
            soft += usize::from(members.len() > 1);
        }
        assert!(soft > 0, "overlapping blobs give some point two clusters");
    }

    #[test]
    fn fits_do_not_depend_on_the_thread_count() {
        let points = blobs(&[[0.0, 0.0], [4.0, 4.0], [8.0, 0.0]], 3000, 1.5);
        let fit = |threads: usize| {
            rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("a pool")
                .install(|| GaussianMixture::fit(&points, 3, &MixtureConfig::default()))
        };
        assert_eq!(fit(1), fit(3));
    }

    #[test]
    fn selection_on_a_sample_keeps_every_point() {
        let points = blobs(&[[0.0, 0.0], [20.0, 0.0]], 400, 1.0);
        let config = MixtureConfig {
            max_components: 5,
            selection_sample: 100,
            ..MixtureConfig::default()
        };
        let clustering = cluster(&points, &config);
        assert_eq!(clustering.components, 2, "{:?}", clustering.bic);
        assert_eq!(clustering.memberships.len(), 800);
        assert_eq!(clustering.bic.len(), 5);
    }

    /// The vector kernels give the same bits as the same arithmetic one value at a
    /// time (pulp's scalar fallback), tails included: fits agree across CPUs.
    #[test]
    fn vector_kernels_match_the_scalar_fallback_bit_for_bit() {
        // 203 points in 5 dimensions: neither a whole number of tiles nor of lanes.
        let mut random = SplitMix64(11);
        let values: Vec<f64> = (0..203 * 5).map(|_| random.unit() * 10.0).collect();
        let points = Points::new(values, 5);
        let mixture = GaussianMixture::fit(&points, 4, &MixtureConfig::default());
        let block = Block::of(&points.values, 5);
        let scalar = mixture.posteriors_with(pulp::Scalar::new(), &block);
        let widest = mixture.posteriors(&block);
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&scalar.0), bits(&widest.0));
        assert_eq!(bits(&scalar.1), bits(&widest.1));
        let (mut one, mut other) = (Sums::zero(4, 5), Sums::zero(4, 5));
        block.accumulate_with(pulp::Scalar::new(), &scalar.0, &mut one);
        block.accumulate(&widest.0, &mut other);
        assert_eq!(bits(&one.weight), bits(&other.weight));
        assert_eq!(bits(&one.first), bits(&other.first));
        assert_eq!(bits(&one.second), bits(&other.second));
    }

    #[test]
    fn exp_is_within_two_ulps_of_libm() {
        let scalar = pulp::Scalar::new();
        let mut x = 0.0;
        while x > -708.0 {
            let (ours, libm) = (exp_nonpositive(scalar, x), x.exp());
            assert!(
                (ours - libm).abs() <= 2.0 * f64::EPSILON * libm,
                "e^{x}: {ours} vs {libm}"
            );
            x -= 0.013_7;
        }
        assert_eq!(exp_nonpositive(scalar, 0.0), 1.0);
        assert_eq!(exp_nonpositive(scalar, -709.0), 0.0);
        assert_eq!(exp_nonpositive(scalar, f64::NEG_INFINITY), 0.0);
    }
}
