//! Dimension reduction before clustering: principal components.
//!
//! RAPTOR reduces embeddings with UMAP before its Gaussian mixtures, because a
//! full-covariance mixture in 384 or 1536 dimensions has more parameters than a
//! document has chunks. PCA does the same job deterministically: for a
//! document's chunks (tens or hundreds of points) an exact eigen-decomposition
//! of the smaller of the d × d covariance and the n × n Gram matrix; for more
//! points and dimensions than [`EXACT_SIDE`] (a corpus tree's document roots),
//! subspace iteration, whose cost is linear in the points.

use rayon::prelude::*;

use crate::mixture::{Points, SplitMix64};

/// Rows per parallel chunk of the covariance sum (fixed: the sum's order must not
/// depend on the thread count).
const CHUNK: usize = 1024;

/// The largest side of a matrix decomposed exactly. A Jacobi sweep costs the
/// cube of the side: the covariance of 1,024-dimensional hashing vectors (or
/// the Gram matrix of as many points) took tens of sweeps for every cluster
/// split, and a corpus tree over 857 short documents' roots spent 90% of its
/// build there.
const EXACT_SIDE: usize = 256;

/// Axes the subspace iteration carries beyond those asked for: the leading
/// ones converge at the rate of the gap between the last carried and the
/// first left out.
const OVERSAMPLED_AXES: usize = 10;

/// Subspace iterations: each multiplies the basis by the scatter matrix once.
const SUBSPACE_ITERATIONS: usize = 12;

/// The points projected on their `components` leading principal axes (fewer when
/// there are fewer points or dimensions).
pub fn principal_components(points: &Points, components: usize) -> Points {
    let (n, d) = (points.len(), points.dim());
    let m = components.min(d).min(n.saturating_sub(1)).max(1);
    if n == 0 {
        return Points::new(Vec::new(), m);
    }
    let mean = column_means(points);
    let axes = if n.min(d) > EXACT_SIDE {
        axes_by_subspace_iteration(points, &mean, m)
    } else if n < d {
        axes_from_gram(points, &mean, m)
    } else {
        leading_eigenvectors(covariance(points, &mean), d, m)
    };
    let values = (0..n)
        .flat_map(|i| {
            let row = points.row(i);
            axes.iter()
                .map(|axis| {
                    axis.iter()
                        .zip(row.iter().zip(&mean))
                        .map(|(a, (x, mu))| a * (x - mu))
                        .sum::<f64>()
                })
                .collect::<Vec<_>>()
        })
        .collect();
    Points::new(values, m)
}

/// The d × d scatter matrix of the centred points (unnormalised covariance:
/// the axes are the same).
fn covariance(points: &Points, mean: &[f64]) -> Vec<f64> {
    let (n, d) = (points.len(), points.dim());
    let rows: Vec<usize> = (0..n).collect();
    let partial: Vec<Vec<f64>> = rows
        .par_chunks(CHUNK)
        .map(|chunk| {
            let mut sum = vec![0.0; d * d];
            let mut centred = vec![0.0; d];
            for &i in chunk {
                for (c, (x, mu)) in centred.iter_mut().zip(points.row(i).iter().zip(mean)) {
                    *c = x - mu;
                }
                for a in 0..d {
                    for b in 0..=a {
                        sum[a * d + b] += centred[a] * centred[b];
                    }
                }
            }
            sum
        })
        .collect();
    let mut covariance = vec![0.0; d * d];
    for sum in &partial {
        for (c, s) in covariance.iter_mut().zip(sum) {
            *c += s;
        }
    }
    mirror_lower(&mut covariance, d);
    covariance
}

/// The mean of each coordinate over the points.
fn column_means(points: &Points) -> Vec<f64> {
    let n = points.len();
    (0..points.dim())
        .map(|j| (0..n).map(|i| points.row(i)[j]).sum::<f64>() / n as f64)
        .collect()
}

/// A symmetric `side` × `side` matrix whose lower triangle was summed: its
/// upper triangle made the same.
fn mirror_lower(matrix: &mut [f64], side: usize) {
    for a in 0..side {
        for b in 0..a {
            matrix[b * side + a] = matrix[a * side + b];
        }
    }
}

/// The leading axes of many points in many dimensions, without the d × d or
/// n × n matrix: a fixed pseudo-random basis of `m` + [`OVERSAMPLED_AXES`]
/// vectors multiplied by the centred points' scatter matrix (through the
/// points, Xᵀ(Xb)) and made orthonormal again, [`SUBSPACE_ITERATIONS`] times;
/// then the scatter matrix on that basis, small, decomposed exactly
/// (Rayleigh–Ritz), whose leading eigenvectors give the axes. Every sum runs in
/// a fixed order, so the axes do not depend on the thread count.
fn axes_by_subspace_iteration(points: &Points, mean: &[f64], m: usize) -> Vec<Vec<f64>> {
    let d = points.dim();
    let width = (m + OVERSAMPLED_AXES).min(d).min(points.len());
    let mut random = SplitMix64(0x5eed_a11e5);
    let mut basis: Vec<Vec<f64>> = (0..width)
        .map(|_| (0..d).map(|_| random.unit() - 0.5).collect())
        .collect();
    orthonormalise(&mut basis);
    for _ in 0..SUBSPACE_ITERATIONS {
        basis = scatter_times(points, mean, &basis);
        orthonormalise(&mut basis);
    }
    let mut small = vec![0.0; width * width];
    for row in centred_projections(points, mean, &basis) {
        for a in 0..width {
            for b in 0..=a {
                small[a * width + b] += row[a] * row[b];
            }
        }
    }
    mirror_lower(&mut small, width);
    leading_eigenvectors(small, width, m)
        .into_iter()
        .map(|u| {
            let mut axis = vec![0.0; d];
            for (weight, vector) in u.iter().zip(&basis) {
                for (x, v) in axis.iter_mut().zip(vector) {
                    *x += weight * v;
                }
            }
            normalise(&mut axis);
            with_positive_largest(axis)
        })
        .collect()
}

/// Each point, centred, projected on each vector of `basis`.
fn centred_projections(points: &Points, mean: &[f64], basis: &[Vec<f64>]) -> Vec<Vec<f64>> {
    (0..points.len())
        .into_par_iter()
        .map(|i| {
            let centred: Vec<f64> = (points.row(i).iter().zip(mean))
                .map(|(x, mu)| x - mu)
                .collect();
            (basis.iter())
                .map(|b| b.iter().zip(&centred).map(|(b, c)| b * c).sum())
                .collect()
        })
        .collect()
}

/// The centred points' scatter matrix times each vector of `basis`, as
/// Xᵀ(Xb): summed over fixed chunks of points, then the chunks in order.
fn scatter_times(points: &Points, mean: &[f64], basis: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let d = points.dim();
    let on_basis = centred_projections(points, mean, basis);
    let rows: Vec<usize> = (0..points.len()).collect();
    let partial: Vec<Vec<Vec<f64>>> = rows
        .par_chunks(CHUNK)
        .map(|chunk| {
            let mut sums = vec![vec![0.0; d]; basis.len()];
            for &i in chunk {
                let row = points.row(i);
                for (sum, weight) in sums.iter_mut().zip(&on_basis[i]) {
                    for ((s, x), mu) in sum.iter_mut().zip(row).zip(mean) {
                        *s += weight * (x - mu);
                    }
                }
            }
            sums
        })
        .collect();
    let mut product = vec![vec![0.0; d]; basis.len()];
    for sums in &partial {
        for (total, sum) in product.iter_mut().zip(sums) {
            for (t, s) in total.iter_mut().zip(sum) {
                *t += s;
            }
        }
    }
    product
}

/// Modified Gram–Schmidt, in order.
fn orthonormalise(basis: &mut [Vec<f64>]) {
    for j in 0..basis.len() {
        let (done, rest) = basis.split_at_mut(j);
        let vector = &mut rest[0];
        for earlier in done.iter() {
            let along: f64 = earlier.iter().zip(vector.iter()).map(|(e, v)| e * v).sum();
            for (v, e) in vector.iter_mut().zip(earlier) {
                *v -= along * e;
            }
        }
        normalise(vector);
    }
}

/// `vector` scaled to length 1; a zero vector stays zero.
fn normalise(vector: &mut [f64]) {
    let norm = vector.iter().map(|x| x * x).sum::<f64>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|x| *x /= norm);
    }
}

/// The leading axes when there are fewer points than dimensions, the usual
/// case for one document's chunks (tens of points, 256 or more dimensions):
/// the centred points' n × n Gram matrix has the same nonzero eigenvalues as
/// the d × d covariance, and each of its eigenvectors `u` gives the axis
/// `Xᵀu`, normalised. A Jacobi sweep costs the cube of the matrix side, so
/// this is (d/n)³ cheaper; it was the build's largest single cost.
fn axes_from_gram(points: &Points, mean: &[f64], m: usize) -> Vec<Vec<f64>> {
    let (n, d) = (points.len(), points.dim());
    let centred: Vec<Vec<f64>> = (0..n)
        .map(|i| {
            points
                .row(i)
                .iter()
                .zip(mean)
                .map(|(x, mu)| x - mu)
                .collect()
        })
        .collect();
    let mut gram = vec![0.0; n * n];
    for a in 0..n {
        for b in 0..=a {
            let dot: f64 = centred[a].iter().zip(&centred[b]).map(|(x, y)| x * y).sum();
            gram[a * n + b] = dot;
            gram[b * n + a] = dot;
        }
    }
    leading_eigenvectors(gram, n, m)
        .into_iter()
        .map(|u| {
            let mut axis: Vec<f64> = (0..d)
                .map(|k| u.iter().zip(&centred).map(|(w, c)| w * c[k]).sum())
                .collect();
            // A zero eigenvalue (repeated points) leaves no direction: the
            // points do not spread along it, so every projection is 0 either way.
            normalise(&mut axis);
            with_positive_largest(axis)
        })
        .collect()
}

/// The eigenvectors of the `m` largest eigenvalues of a symmetric matrix (cyclic
/// Jacobi rotations), each with its largest entry made positive so the signs are
/// fixed.
fn leading_eigenvectors(mut a: Vec<f64>, d: usize, m: usize) -> Vec<Vec<f64>> {
    let mut v = vec![0.0; d * d];
    for i in 0..d {
        v[i * d + i] = 1.0;
    }
    for _ in 0..100 {
        let off: f64 = (0..d)
            .flat_map(|i| (0..i).map(move |j| (i, j)))
            .map(|(i, j)| a[i * d + j] * a[i * d + j])
            .sum();
        let scale: f64 = (0..d).map(|i| a[i * d + i] * a[i * d + i]).sum();
        if off <= 1e-22 * scale.max(f64::MIN_POSITIVE) {
            break;
        }
        for p in 0..d {
            for q in p + 1..d {
                let apq = a[p * d + q];
                if apq.abs() < 1e-300 {
                    continue;
                }
                let theta = (a[q * d + q] - a[p * d + p]) / (2.0 * apq);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let t = if theta == 0.0 { 1.0 } else { t };
                let c = 1.0 / (t * t + 1.0).sqrt();
                let s = t * c;
                for k in 0..d {
                    let (akp, akq) = (a[k * d + p], a[k * d + q]);
                    a[k * d + p] = c * akp - s * akq;
                    a[k * d + q] = s * akp + c * akq;
                }
                for k in 0..d {
                    let (apk, aqk) = (a[p * d + k], a[q * d + k]);
                    a[p * d + k] = c * apk - s * aqk;
                    a[q * d + k] = s * apk + c * aqk;
                }
                for k in 0..d {
                    let (vkp, vkq) = (v[k * d + p], v[k * d + q]);
                    v[k * d + p] = c * vkp - s * vkq;
                    v[k * d + q] = s * vkp + c * vkq;
                }
            }
        }
    }
    let mut order: Vec<usize> = (0..d).collect();
    order.sort_by(|&x, &y| a[y * d + y].total_cmp(&a[x * d + x]).then(x.cmp(&y)));
    order
        .into_iter()
        .take(m)
        .map(|col| with_positive_largest((0..d).map(|k| v[k * d + col]).collect()))
        .collect()
}

/// `axis`, negated if need be so that its largest entry is positive: an
/// eigenvector's sign is arbitrary, and the projections must not depend on it.
fn with_positive_largest(mut axis: Vec<f64>) -> Vec<f64> {
    let largest = axis
        .iter()
        .copied()
        .max_by(|x, y| x.abs().total_cmp(&y.abs()))
        .unwrap_or(1.0);
    if largest < 0.0 {
        axis.iter_mut().for_each(|x| *x = -*x);
    }
    axis
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_component_follows_the_widest_spread() {
        // Points along the direction (1, 2, 0) with a little noise across it.
        let values: Vec<f64> = (0..200)
            .flat_map(|i| {
                let t = i as f64 / 10.0 - 10.0;
                let wobble = if i % 2 == 0 { 0.1 } else { -0.1 };
                [t, 2.0 * t, wobble]
            })
            .collect();
        let reduced = principal_components(&Points::new(values, 3), 1);
        assert_eq!((reduced.len(), reduced.dim()), (200, 1));
        // The projection keeps the spacing along the line: |(1,2,0)| per unit of t.
        let step = reduced.row(1)[0] - reduced.row(0)[0];
        assert!((step.abs() - 0.1 * 5f64.sqrt()).abs() < 1e-3, "{step}");
    }

    #[test]
    fn few_points_take_the_same_axes_through_their_gram_matrix() {
        // Six points in eight dimensions: the Gram path; its axes must be the
        // covariance path's, sign included.
        let (n, d) = (6, 8);
        let values: Vec<f64> = (0..n * d)
            .map(|k| ((k * 37 % 23) as f64 - 11.0) / 7.0)
            .collect();
        let points = Points::new(values, d);
        let mean = column_means(&points);
        let by_covariance = leading_eigenvectors(covariance(&points, &mean), d, 3);
        let by_gram = axes_from_gram(&points, &mean, 3);
        for (a, b) in by_covariance.iter().zip(&by_gram) {
            for (x, y) in a.iter().zip(b) {
                assert!((x - y).abs() < 1e-9, "{a:?} vs {b:?}");
            }
        }
    }

    /// Many points in many dimensions take the subspace iteration, whose axes
    /// are the exact decomposition's: three planted directions of different
    /// spread under noise in every dimension, found with their signs.
    #[test]
    fn many_points_take_the_exact_axes_by_subspace_iteration() {
        let (n, d) = (EXACT_SIDE + 30, EXACT_SIDE + 20);
        let mut random = SplitMix64(7);
        let directions: Vec<Vec<f64>> = (0..3)
            .map(|_| (0..d).map(|_| random.unit() - 0.5).collect())
            .collect();
        let values: Vec<f64> = (0..n)
            .flat_map(|_| {
                let weights = [10.0, 5.0, 2.0].map(|spread| spread * (random.unit() - 0.5));
                let mut point: Vec<f64> = (0..d).map(|_| 0.1 * (random.unit() - 0.5)).collect();
                for (weight, direction) in weights.iter().zip(&directions) {
                    for (x, v) in point.iter_mut().zip(direction) {
                        *x += weight * v;
                    }
                }
                point
            })
            .collect();
        let points = Points::new(values, d);
        let mean = column_means(&points);
        let exact = leading_eigenvectors(covariance(&points, &mean), d, 3);
        let iterated = axes_by_subspace_iteration(&points, &mean, 3);
        for (a, b) in exact.iter().zip(&iterated) {
            let along: f64 = a.iter().zip(b).map(|(x, y)| x * y).sum();
            assert!(along > 1.0 - 1e-9, "the axes are {along} alike");
        }
        let reduced = principal_components(&points, 3);
        assert_eq!((reduced.len(), reduced.dim()), (n, 3));
        let first: f64 = (points.row(0).iter().zip(&mean).zip(&iterated[0]))
            .map(|((x, mu), a)| (x - mu) * a)
            .sum();
        assert!((reduced.row(0)[0] - first).abs() < 1e-12);
    }

    #[test]
    fn eigenvectors_of_a_known_matrix() {
        // Eigenvalues 3 (axis (1,1)/√2) and 1 (axis (1,-1)/√2).
        let axes = leading_eigenvectors(vec![2.0, 1.0, 1.0, 2.0], 2, 2);
        let half = 0.5f64.sqrt();
        assert!((axes[0][0] - half).abs() < 1e-12 && (axes[0][1] - half).abs() < 1e-12);
        assert!((axes[1][0].abs() - half).abs() < 1e-12);
        assert!((axes[1][0] + axes[1][1]).abs() < 1e-12);
    }
}
