//! Random actions of a flat action space, as the bytes of one env's action row, pre-generated
//! from a seeded generator so that measuring does not include sampling.

use rand::{Rng, SeedableRng};
use ringenv_runtime::DType;
use ringenv_worker::Space;

fn put(bytes: &mut Vec<u8>, dtype: DType, v: f64) {
    match dtype {
        DType::Bool | DType::U8 => bytes.push(v as u8),
        DType::I8 => bytes.push(v as i8 as u8),
        DType::I16 => bytes.extend((v as i16).to_ne_bytes()),
        DType::U16 => bytes.extend((v as u16).to_ne_bytes()),
        DType::I32 => bytes.extend((v as i32).to_ne_bytes()),
        DType::U32 => bytes.extend((v as u32).to_ne_bytes()),
        DType::I64 => bytes.extend((v as i64).to_ne_bytes()),
        DType::U64 => bytes.extend((v as u64).to_ne_bytes()),
        DType::F16 => bytes.extend([0, 0]),
        DType::F32 => bytes.extend((v as f32).to_ne_bytes()),
        DType::F64 => bytes.extend(v.to_ne_bytes()),
    }
}

/// `count` batches of actions for `num_envs` envs, each batch the bytes of the action leaf.
///
/// # Errors
/// A message for an action space that is not flat.
pub fn batches(space: &Space, num_envs: usize, count: usize, seed: u64) -> Result<Vec<Vec<u8>>, String> {
    let mut rng = rand_pcg::Pcg64::seed_from_u64(seed);
    let mut sample = |bytes: &mut Vec<u8>| -> Result<(), String> {
        match space {
            Space::Discrete { n, start } => put(bytes, DType::I64, (start + rng.random_range(0..*n)) as f64),
            Space::MultiDiscrete { nvec, start, dtype } => {
                for (n, s) in nvec.iter().zip(start) {
                    put(bytes, *dtype, (s + rng.random_range(0..*n)) as f64);
                }
            }
            Space::MultiBinary { shape } => {
                for _ in 0..shape.iter().product::<usize>() {
                    put(bytes, DType::I8, f64::from(rng.random_range(0..2u8)));
                }
            }
            Space::Box { dtype, low, high, .. } => {
                for (l, h) in low.iter().zip(high) {
                    let (l, h) = (l.max(-1.0e3), h.min(1.0e3));
                    let v = if h > l { rng.random_range(l..=h) } else { l };
                    put(bytes, *dtype, if matches!(dtype, DType::F32 | DType::F64) { v } else { v.round() });
                }
            }
            other => return Err(format!("action space {other:?} is not flat; ringenv envs take flat actions")),
        }
        Ok(())
    };
    (0..count)
        .map(|_| {
            let mut bytes = Vec::new();
            for _ in 0..num_envs {
                sample(&mut bytes)?;
            }
            Ok(bytes)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discrete_actions_stay_in_range_and_are_seeded() {
        let space = Space::Discrete { n: 3, start: -1 };
        let a = batches(&space, 5, 20, 7).unwrap();
        let b = batches(&space, 5, 20, 7).unwrap();
        assert_eq!(a, b);
        for batch in &a {
            let values: &[i64] = bytemuck::cast_slice(batch);
            assert_eq!(values.len(), 5);
            assert!(values.iter().all(|v| (-1..=1).contains(v)));
        }
        assert!(batches(&Space::tuple([space.clone(), space]), 1, 1, 0).is_err());
    }
}
