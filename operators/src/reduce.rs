//! Dimension reduction before clustering: principal components.
//!
//! RAPTOR reduces embeddings with UMAP before its Gaussian mixtures, because a
//! full-covariance mixture in 384 or 1536 dimensions has more parameters than a
//! document has chunks. PCA does the same job deterministically, in one pass over
//! the points plus an eigen-decomposition of the smaller of the d × d covariance
//! and the n × n Gram matrix.

use rayon::prelude::*;

use crate::mixture::Points;

/// Rows per parallel chunk of the covariance sum (fixed: the sum's order must not
/// depend on the thread count).
const CHUNK: usize = 1024;

/// The points projected on their `components` leading principal axes (fewer when
/// there are fewer points or dimensions).
pub fn principal_components(points: &Points, components: usize) -> Points {
    let (n, d) = (points.len(), points.dim());
    let m = components.min(d).min(n.saturating_sub(1)).max(1);
    if n == 0 {
        return Points::new(Vec::new(), m);
    }
    let mean: Vec<f64> = (0..d)
        .map(|j| (0..n).map(|i| points.row(i)[j]).sum::<f64>() / n as f64)
        .collect();
    let axes = if n < d {
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
    for a in 0..d {
        for b in 0..a {
            covariance[b * d + a] = covariance[a * d + b];
        }
    }
    covariance
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
            let norm = axis.iter().map(|x| x * x).sum::<f64>().sqrt();
            // A zero eigenvalue (repeated points) leaves no direction: the
            // points do not spread along it, so every projection is 0 either way.
            if norm > 0.0 {
                axis.iter_mut().for_each(|x| *x /= norm);
            }
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
        let mean: Vec<f64> = (0..d)
            .map(|j| (0..n).map(|i| points.row(i)[j]).sum::<f64>() / n as f64)
            .collect();
        let by_covariance = leading_eigenvectors(covariance(&points, &mean), d, 3);
        let by_gram = axes_from_gram(&points, &mean, 3);
        for (a, b) in by_covariance.iter().zip(&by_gram) {
            for (x, y) in a.iter().zip(b) {
                assert!((x - y).abs() < 1e-9, "{a:?} vs {b:?}");
            }
        }
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
