//! The kernel entry codec the warm-start index and the shipped kernels share: a
//! compiled kernel as bytes (its entry symbol, its parameter validator with the launch
//! checks the compiler hoisted out of it, then its cubin), and back. A leaf.

use cutile::cuda_async::device_context::{
    PointerParamType, ScalarParamType, TensorParamType, ValidParamType, Validator,
};
use cutile::cuda_async::predicate::{Atom, LaunchCheck, Predicate, Term};

/// The codec's version, also part of the warm-start index's entry names.
pub(crate) const PAYLOAD_MAGIC: &str = "tilegym-cutile-rs warm-start v1";

/// An index entry's payload: the entry symbol, the validator's parameters and
/// launch checks as text, a blank line, then the cubin (also the shipped format).
pub(crate) fn payload(entry: &str, validator: &Validator, cubin: &[u8]) -> Vec<u8> {
    let mut payload = format!("{PAYLOAD_MAGIC}\nentry {entry}\n");
    for p in &validator.params {
        payload.push_str(&match p {
            ValidParamType::Scalar(s) => format!("scalar {}\n", s.element_type),
            ValidParamType::Pointer(p) => format!("pointer {} {}\n", u8::from(p.mutable), p.element_type),
            ValidParamType::Tensor(t) => format!(
                "tensor {} {}\n",
                t.element_type,
                t.shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(",")
            ),
        });
    }
    payload.push_str(&encode_checks(&validator.launch_checks));
    payload.push('\n');
    let mut payload = payload.into_bytes();
    payload.extend_from_slice(cubin);
    payload
}

/// The parts of a [`payload`]: its entry symbol, its validator and its cubin; `None` for
/// anything [`payload`] did not write.
pub(crate) fn parse(payload: &[u8]) -> Option<(&str, Validator, &[u8])> {
    let split = payload.windows(2).position(|w| w == b"\n\n")?;
    let header = std::str::from_utf8(&payload[..split]).ok()?;
    let cubin = &payload[split + 2..];
    let mut lines = header.lines();
    if lines.next()? != PAYLOAD_MAGIC {
        return None;
    }
    let entry = lines.next()?.strip_prefix("entry ")?;
    let mut params = Vec::new();
    let mut checks = String::new();
    for line in lines {
        if line.starts_with("check\t") {
            checks.push_str(line);
            checks.push('\n');
            continue;
        }
        let fields: Vec<&str> = line.split(' ').collect();
        params.push(match fields.as_slice() {
            ["scalar", ty] => ValidParamType::Scalar(ScalarParamType { element_type: ty.to_string() }),
            ["pointer", m, ty] => {
                ValidParamType::Pointer(PointerParamType { mutable: *m == "1", element_type: ty.to_string() })
            }
            ["tensor", ty, shape] => ValidParamType::Tensor(TensorParamType {
                element_type: ty.to_string(),
                shape: shape.split(',').filter(|d| !d.is_empty()).map(str::parse).collect::<Result<_, _>>().ok()?,
            }),
            _ => return None,
        });
    }
    Some((entry, Validator { params, launch_checks: decode_checks(&checks)? }, cubin))
}

/// Launch checks as text, one line each: `check`, the predicate kind, the
/// divisor (0 unless divisible-by), the term's constant, its atoms with their
/// coefficients, and the cause with backslashes and line breaks escaped.
pub fn encode_checks(checks: &[LaunchCheck]) -> String {
    let mut out = String::new();
    for check in checks {
        let (kind, term, divisor) = match &check.predicate {
            Predicate::Zero(t) => ("zero", t, 0),
            Predicate::Nonzero(t) => ("nonzero", t, 0),
            Predicate::Positive(t) => ("positive", t, 0),
            Predicate::DivisibleBy { term, divisor } => ("divisible", term, *divisor),
        };
        let atoms: Vec<String> = term
            .coeffs()
            .iter()
            .map(|(atom, c)| match atom {
                Atom::Dim { param, axis } => format!("dim:{param}:{axis}:{c}"),
                Atom::Iv(id) => format!("iv:{id}:{c}"),
                Atom::TileBlockId(k) => format!("tbid:{k}:{c}"),
                Atom::NumTileBlocks(k) => format!("ntb:{k}:{c}"),
                Atom::ViewExtent { param, axis } => format!("view:{param}:{axis}:{c}"),
                Atom::TileCount { param, axis, tile } => format!("tiles:{param}:{axis}:{tile}:{c}"),
            })
            .collect();
        let cause = check.cause.replace('\\', "\\\\").replace('\n', "\\n").replace('\r', "\\r");
        out.push_str(&format!("check\t{kind}\t{divisor}\t{}\t{}\t{cause}\n", term.constant_part(), atoms.join(" ")));
    }
    out
}

/// The inverse of [`encode_checks`]; `None` for anything it did not write.
pub fn decode_checks(text: &str) -> Option<Vec<LaunchCheck>> {
    let mut checks = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.splitn(6, '\t').collect();
        let ["check", kind, divisor, constant, atoms, cause] = fields.as_slice() else { return None };
        let mut term = Term::constant(constant.parse().ok()?);
        for token in atoms.split(' ').filter(|t| !t.is_empty()) {
            let parts: Vec<&str> = token.split(':').collect();
            let n = |i: usize| parts.get(i)?.parse::<usize>().ok();
            let (atom, coeff) = match parts.as_slice() {
                ["dim", _, _, c] => (Atom::Dim { param: n(1)?, axis: n(2)? }, c),
                ["iv", id, c] => (Atom::Iv(id.parse().ok()?), c),
                ["tbid", _, c] => (Atom::TileBlockId(n(1)?), c),
                ["ntb", _, c] => (Atom::NumTileBlocks(n(1)?), c),
                ["view", _, _, c] => (Atom::ViewExtent { param: n(1)?, axis: n(2)? }, c),
                ["tiles", _, _, tile, c] => {
                    (Atom::TileCount { param: n(1)?, axis: n(2)?, tile: tile.parse().ok()? }, c)
                }
                _ => return None,
            };
            term = term.add(&Term::affine(atom, coeff.parse().ok()?, 0))?;
        }
        let predicate = match (*kind, divisor.parse::<i64>().ok()?) {
            ("zero", 0) => Predicate::Zero(term),
            ("nonzero", 0) => Predicate::Nonzero(term),
            ("positive", 0) => Predicate::Positive(term),
            ("divisible", d) if d >= 1 => Predicate::DivisibleBy { term, divisor: d },
            _ => return None,
        };
        let mut unescaped = String::with_capacity(cause.len());
        let mut chars = cause.chars();
        while let Some(c) = chars.next() {
            match (c, c == '\\') {
                (_, true) => match chars.next()? {
                    'n' => unescaped.push('\n'),
                    'r' => unescaped.push('\r'),
                    '\\' => unescaped.push('\\'),
                    _ => return None,
                },
                (c, false) => unescaped.push(c),
            }
        }
        checks.push(LaunchCheck { predicate, cause: unescaped });
    }
    Some(checks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn launch_checks_round_trip_and_garbage_is_refused() {
        let dim = Term::atom(Atom::Dim { param: 1, axis: 0 });
        let blocks = Term::affine(Atom::NumTileBlocks(0), -4, 4);
        let tiles = Term::affine(Atom::TileCount { param: 0, axis: 1, tile: 64 }, 3, -1);
        let checks = vec![
            LaunchCheck { predicate: Predicate::Positive(dim.add(&blocks).unwrap()), cause: "a\\b\nc\\nd\r".into() },
            LaunchCheck {
                predicate: Predicate::Nonzero(Term::atom(Atom::ViewExtent { param: 1, axis: 1 })),
                cause: String::new(),
            },
            LaunchCheck { predicate: Predicate::DivisibleBy { term: tiles, divisor: 16 }, cause: "x".into() },
            LaunchCheck { predicate: Predicate::Zero(Term::constant(0)), cause: "tab\there".into() },
        ];
        let text = encode_checks(&checks);
        assert_eq!(decode_checks(&text), Some(checks));
        assert_eq!(decode_checks("check\tpositive\t0\t1\tdim:1\tcause\n"), None);
        assert_eq!(decode_checks("check\tdivisible\t0\t1\t\tcause\n"), None);
        assert_eq!(decode_checks("check\tzero\t0\t0\t\tbad escape \\q\n"), None);
    }
}
