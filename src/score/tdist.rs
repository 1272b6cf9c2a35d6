//! Student's t distribution and the pooled two-sample t-test, as much of it as the RCP check
//! needs (the official checker calls scipy's `ttest_ind_from_stats(equal_var=True)`).

/// ln Γ(x) for x > 0 (Lanczos approximation, g = 7, 9 terms; relative error about 1e-15).
pub fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const COEF: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x) Γ(1-x) = π / sin(πx)
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).abs().ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = COEF[0];
    let t = x + G + 0.5;
    for (i, c) in COEF.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// The regularized incomplete beta function I_x(a, b), for a, b > 0 and 0 <= x <= 1.
pub fn incomplete_beta(x: f64, a: f64, b: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    let front = ln_front.exp();
    // The continued fraction converges fast for x < (a+1)/(a+b+2); use symmetry otherwise.
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_continued_fraction(x, a, b) / a
    } else {
        1.0 - front * beta_continued_fraction(1.0 - x, b, a) / b
    }
}

/// Lentz's evaluation of the continued fraction of I_x(a, b).
fn beta_continued_fraction(x: f64, a: f64, b: f64) -> f64 {
    const TINY: f64 = 1e-300;
    const EPS: f64 = 1e-16;
    let away_from_zero = |v: f64| if v.abs() < TINY { TINY } else { v };
    let mut c = 1.0;
    let mut d = 1.0 / away_from_zero(1.0 - (a + b) * x / (a + 1.0));
    let mut h = d;
    // one term of the fraction with coefficient `aa`: the factor it multiplies h by
    let mut term = |aa: f64| {
        d = 1.0 / away_from_zero(1.0 + aa * d);
        c = away_from_zero(1.0 + aa / c);
        d * c
    };
    for m in 1..=500 {
        let m = m as f64;
        let m2 = 2.0 * m;
        // even step
        h *= term(m * (b - m) * x / ((a + m2 - 1.0) * (a + m2)));
        // odd step
        let delta = term(-(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0)));
        h *= delta;
        if (delta - 1.0).abs() < EPS {
            break;
        }
    }
    h
}

/// P(T <= t) for Student's t with `df` degrees of freedom (df > 0).
pub fn t_cdf(t: f64, df: f64) -> f64 {
    if t.is_nan() || df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    if t.is_infinite() {
        return if t > 0.0 { 1.0 } else { 0.0 };
    }
    let x = df / (df + t * t);
    let tail = 0.5 * incomplete_beta(x, df / 2.0, 0.5);
    if t > 0.0 {
        1.0 - tail
    } else {
        tail
    }
}

/// One-sided p-value P(T <= t) of the pooled-variance (equal_var) two-sample t-test from
/// summary statistics; what the RCP checker derives from scipy's two-sided p-value.
pub fn one_sided_p_value(mean1: f64, std1: f64, n1: f64, mean2: f64, std2: f64, n2: f64) -> f64 {
    let df = n1 + n2 - 2.0;
    let pooled_var = ((n1 - 1.0) * std1 * std1 + (n2 - 1.0) * std2 * std2) / df;
    let denom = (pooled_var * (1.0 / n1 + 1.0 / n2)).sqrt();
    let t = (mean1 - mean2) / denom;
    t_cdf(t, df)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol
    }

    #[test]
    fn ln_gamma_matches_factorials() {
        // Γ(n) = (n-1)!
        let mut fact = 1.0f64;
        for n in 1..20 {
            assert!(close(ln_gamma(n as f64), fact.ln(), 1e-12), "n={n}");
            fact *= n as f64;
        }
        // Γ(1/2) = sqrt(π)
        assert!(close(
            ln_gamma(0.5),
            std::f64::consts::PI.sqrt().ln(),
            1e-14
        ));
    }

    #[test]
    fn cdf_matches_closed_forms() {
        // df = 1 (Cauchy): F(t) = 1/2 + atan(t)/π; df = 2: F(t) = 1/2 + t / (2 sqrt(2 + t²))
        for &t in &[-30.0, -3.0, -1.0, -0.2, 0.0, 0.4, 1.0, 2.5, 12.0, 100.0] {
            let cauchy = 0.5 + f64::atan(t) / std::f64::consts::PI;
            assert!(
                close(t_cdf(t, 1.0), cauchy, 1e-13),
                "df=1 t={t}: {} vs {cauchy}",
                t_cdf(t, 1.0)
            );
            let two = 0.5 + t / (2.0 * (2.0 + t * t).sqrt());
            assert!(close(t_cdf(t, 2.0), two, 1e-13), "df=2 t={t}");
        }
    }

    #[test]
    fn cdf_matches_published_quantiles() {
        // Table values of the t distribution (one-sided quantiles).
        let table = [
            (10.0, 0.95, 1.812_461_123),
            (10.0, 0.975, 2.228_138_852),
            (5.0, 0.99, 3.364_929_997),
            (30.0, 0.95, 1.697_260_887),
            (16.0, 0.95, 1.745_883_676),
            (3.0, 0.995, 5.840_909_310),
        ];
        for (df, p, q) in table {
            assert!(
                close(t_cdf(q, df), p, 1e-9),
                "df={df} q={q}: {}",
                t_cdf(q, df)
            );
            assert!(close(t_cdf(-q, df), 1.0 - p, 1e-9));
        }
    }

    #[test]
    fn p_value_is_symmetric_and_monotone() {
        let p_low = one_sided_p_value(30.0, 1.0, 13.0, 35.0, 1.0, 3.0);
        let p_mid = one_sided_p_value(35.0, 1.0, 13.0, 35.0, 1.0, 3.0);
        let p_high = one_sided_p_value(40.0, 1.0, 13.0, 35.0, 1.0, 3.0);
        assert!(p_low < 0.05 && close(p_mid, 0.5, 1e-15) && p_high > 0.95);
    }
}
