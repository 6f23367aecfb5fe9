//! The segment header: what a worker checks before it touches anything else in the segment.
//!
//! It records the magic, the layout version, the counts and specs, every offset, and the pool's
//! [`SpinSettings`]. A worker rebuilds the [`Layout`] with its own code and compares each offset,
//! so a worker built from other sources refuses the segment, naming the field and both values.
//!
//! ```
//! use ringenv_runtime::{read_header, write_header, write_header_with, read_header_settings, ArraySpec, DType, Layout};
//! let layout = Layout::single(4, 2, 2, ArraySpec::new(DType::F32, &[4]),
//!                             ArraySpec::new(DType::I64, &[]), DType::F32).unwrap();
//! let mut bytes = vec![0u8; 4096];
//! write_header(&mut bytes, &layout);
//! assert_eq!(read_header(&bytes, layout.total_size()).unwrap(), layout);
//! bytes[0] = b'X';
//! assert!(read_header(&bytes, layout.total_size()).is_err());
//!
//! use ringenv_runtime::{Probe, SpinPolicy, SpinSettings};
//! let settings = SpinSettings { policy: SpinPolicy::NEVER, probe: Probe::Yield };
//! write_header_with(&mut bytes, &layout, &settings);
//! assert_eq!(read_header_settings(&bytes).unwrap(), settings);
//! ```

use crate::layout::{ArraySpec, Layout, LayoutError, HEADER_REGION, MAX_LEAVES, MAX_NDIM};
use crate::{DType, Probe, SpinPolicy, SpinSettings};
use bytemuck::{Pod, Zeroable};

/// `b"RINGENV\0"`.
pub const MAGIC: [u8; 8] = *b"RINGENV\0";
/// Version of the segment layout. Bump on any change to the header, the layout function, the
/// ring or descriptor formats, or the dtype codes.
pub const LAYOUT_VERSION: u32 = 7;

#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
struct ArrayDesc {
    dtype: u32,
    ndim: u32,
    shape: [u64; MAX_NDIM],
}

/// Fixed offsets recorded in the header, then one per observation leaf and one per action leaf.
const FIXED_OFFSETS: [&str; 12] = [
    "completion_wakeup",
    "commands",
    "command_stride",
    "metrics",
    "slots",
    "slot_stride",
    "slot.reward",
    "slot.terminated",
    "slot.truncated",
    "slot.seed",
    "slot.seed_flags",
    "info_arenas",
];
const NUM_OFFSETS: usize = FIXED_OFFSETS.len() + MAX_LEAVES;

#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
struct Header {
    magic: [u8; 8],
    version: u32,
    reward_dtype: u32,
    total_size: u64,
    num_envs: u64,
    num_workers: u64,
    depth: u64,
    obs_leaves: u32,
    action_leaves: u32,
    /// The observation leaves, then the action leaves; the rest zeroed.
    leaves: [ArrayDesc; MAX_LEAVES],
    /// [`FIXED_OFFSETS`], then the slot offset of each leaf in the order of `leaves`.
    offsets: [u64; NUM_OFFSETS],
    /// The pool's wait settings.
    settings: SettingsBlock,
    /// Bytes of each worker's info arena ([`Layout::info_arena_bytes`]).
    info_arena: u64,
}

/// [`SpinSettings`] as the header stores them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
struct SettingsBlock {
    /// [`SpinPolicy::spin`] in nanoseconds.
    spin_ns: u64,
    /// [`Probe::code`].
    probe: u32,
    /// Zero.
    reserved: u32,
}

const _: () = assert!(std::mem::size_of::<Header>() <= HEADER_REGION);

fn offsets(l: &Layout) -> Vec<(String, u64)> {
    let s = l.slot_arrays();
    let fixed = [
        l.completion_wakeup_offset(),
        l.command_offset(0),
        l.command_stride(),
        l.pool_metrics_offset(),
        l.slots_offset(),
        l.slot_stride(),
        s.reward,
        s.terminated,
        s.truncated,
        s.seed,
        s.seed_flags,
        l.info_arena_offset(0),
    ];
    let named = FIXED_OFFSETS.iter().zip(fixed).map(|(n, v)| (n.to_string(), v as u64));
    let obs = s.obs.iter().enumerate().map(|(k, &v)| (format!("slot.obs[{k}]"), v as u64));
    let action = s.action.iter().enumerate().map(|(k, &v)| (format!("slot.action[{k}]"), v as u64));
    named.chain(obs).chain(action).collect()
}

fn desc(spec: &ArraySpec) -> ArrayDesc {
    let mut shape = [0u64; MAX_NDIM];
    for (d, s) in shape.iter_mut().zip(&spec.shape) {
        *d = *s as u64;
    }
    ArrayDesc { dtype: spec.dtype.code(), ndim: spec.shape.len() as u32, shape }
}

/// Why a segment was refused. Where two values are named, `segment` is what the main process
/// wrote and `worker` what this build expects.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// The segment is smaller than a header, or than the size its header records.
    #[error("segment is {mapped} bytes but its header needs {needed}")]
    TooSmall {
        /// Size of the mapping in bytes.
        mapped: usize,
        /// Size the header needs or records, in bytes.
        needed: usize,
    },
    /// Not a ringenv segment.
    #[error("not a ringenv segment: magic {found:?}, expected {MAGIC:?}")]
    Magic {
        /// The first eight bytes found.
        found: [u8; 8],
    },
    /// Built by a ringenv with another layout version.
    #[error(
        "segment layout version {segment} (main process) differs from {worker} (this worker); build the main \
         process and the worker from the same ringenv version"
    )]
    Version {
        /// Version in the segment (the main process).
        segment: u32,
        /// Version of this build (the worker).
        worker: u32,
    },
    /// A dtype code this build does not know: names the array.
    #[error("unknown {array} dtype code {code} in the segment header")]
    DType {
        /// `"observation"`, `"action"` or `"reward"`.
        array: &'static str,
        /// The code found.
        code: u32,
    },
    /// The recorded counts do not make a valid layout.
    #[error("segment header describes an invalid layout: {0}")]
    Layout(#[source] LayoutError),
    /// The wait settings hold a value this build does not know: names the field.
    #[error("unknown value {value} of the wait setting {field} in the segment header")]
    Settings {
        /// `"probe"`.
        field: &'static str,
        /// The value found.
        value: u64,
    },
    /// A recorded offset differs from the one this build computes.
    #[error("segment field {field} is {segment} (main process) but this worker computes {worker}")]
    Offset {
        /// Name of the field (for example `"slot_stride"` or `"slot.obs[2]"`).
        field: String,
        /// Value in the segment (the main process).
        segment: u64,
        /// Value this build computes (the worker).
        worker: u64,
    },
}

/// Writes the header of `layout`, with the default wait settings, into the first bytes of
/// `region`.
///
/// # Panics
/// When `region` is shorter than the header.
pub fn write(region: &mut [u8], layout: &Layout) {
    write_with(region, layout, &SpinSettings::default());
}

/// Writes the header of `layout` and the pool's wait `settings` into the first bytes of `region`.
///
/// # Panics
/// When `region` is shorter than the header.
pub fn write_with(region: &mut [u8], layout: &Layout, settings: &SpinSettings) {
    let spin_ns = settings.policy.spin.as_nanos().min(u128::from(u64::MAX)) as u64;
    let mut header = Header {
        magic: MAGIC,
        version: LAYOUT_VERSION,
        reward_dtype: layout.reward.code(),
        total_size: layout.total_size() as u64,
        num_envs: layout.num_envs as u64,
        num_workers: layout.num_workers as u64,
        depth: layout.depth as u64,
        obs_leaves: layout.obs.len() as u32,
        action_leaves: layout.action.len() as u32,
        leaves: [ArrayDesc::zeroed(); MAX_LEAVES],
        offsets: [0; NUM_OFFSETS],
        settings: SettingsBlock { spin_ns, probe: settings.probe.code(), reserved: 0 },
        info_arena: layout.info_arena_bytes() as u64,
    };
    for (d, spec) in header.leaves.iter_mut().zip(layout.obs.iter().chain(&layout.action)) {
        *d = desc(spec);
    }
    for (o, (_, v)) in header.offsets.iter_mut().zip(offsets(layout)) {
        *o = v;
    }
    region[..std::mem::size_of::<Header>()].copy_from_slice(bytemuck::bytes_of(&header));
}

fn spec(array: &'static str, d: &ArrayDesc) -> Result<ArraySpec, HeaderError> {
    let dtype = DType::from_code(d.dtype).ok_or(HeaderError::DType { array, code: d.dtype })?;
    if d.ndim as usize > MAX_NDIM {
        return Err(HeaderError::Layout(LayoutError::TooManyDims(array, d.ndim as usize)));
    }
    let shape: Vec<usize> = d.shape[..d.ndim as usize].iter().map(|&s| s as usize).collect();
    Ok(ArraySpec::new(dtype, &shape))
}

/// Reads and validates the header at the start of `region`, a mapping of `mapped` bytes.
///
/// # Errors
/// A [`HeaderError`] naming the first field that does not match this build.
pub fn read(region: &[u8], mapped: usize) -> Result<Layout, HeaderError> {
    let size = std::mem::size_of::<Header>();
    if region.len() < size || mapped < HEADER_REGION {
        return Err(HeaderError::TooSmall { mapped, needed: HEADER_REGION });
    }
    let h: Header = bytemuck::pod_read_unaligned(&region[..size]);
    if h.magic != MAGIC {
        return Err(HeaderError::Magic { found: h.magic });
    }
    if h.version != LAYOUT_VERSION {
        return Err(HeaderError::Version { segment: h.version, worker: LAYOUT_VERSION });
    }
    let reward =
        DType::from_code(h.reward_dtype).ok_or(HeaderError::DType { array: "reward", code: h.reward_dtype })?;
    let count = |x: u64| usize::try_from(x).map_err(|_| HeaderError::Layout(LayoutError::TooLarge));
    let (n_obs, n_act) = (h.obs_leaves as usize, h.action_leaves as usize);
    if n_obs + n_act > MAX_LEAVES {
        return Err(HeaderError::Layout(LayoutError::TooManyLeaves(n_obs + n_act)));
    }
    let obs = h.leaves[..n_obs].iter().map(|d| spec("observation", d)).collect::<Result<Vec<_>, _>>()?;
    let action = h.leaves[n_obs..n_obs + n_act].iter().map(|d| spec("action", d)).collect::<Result<Vec<_>, _>>()?;
    let layout = Layout::new(count(h.num_envs)?, count(h.num_workers)?, count(h.depth)?, obs, action, reward)
        .and_then(|l| l.with_info_arena(usize::try_from(h.info_arena).map_err(|_| LayoutError::TooLarge)?))
        .map_err(HeaderError::Layout)?;
    for (segment, (field, worker)) in h.offsets.into_iter().zip(offsets(&layout)) {
        if segment != worker {
            return Err(HeaderError::Offset { field, segment, worker });
        }
    }
    if h.total_size != layout.total_size() as u64 {
        let worker = layout.total_size() as u64;
        return Err(HeaderError::Offset { field: "total_size".into(), segment: h.total_size, worker });
    }
    if mapped < layout.total_size() {
        return Err(HeaderError::TooSmall { mapped, needed: layout.total_size() });
    }
    Ok(layout)
}

/// Reads the wait settings of the header at the start of `region` (after [`read`] accepted it).
///
/// # Errors
/// [`HeaderError::TooSmall`] when `region` is shorter than a header; [`HeaderError::Settings`]
/// naming a field this build does not know the value of.
pub fn read_settings(region: &[u8]) -> Result<SpinSettings, HeaderError> {
    let size = std::mem::size_of::<Header>();
    if region.len() < size {
        return Err(HeaderError::TooSmall { mapped: region.len(), needed: size });
    }
    let h: Header = bytemuck::pod_read_unaligned(&region[..size]);
    let SettingsBlock { spin_ns, probe, .. } = h.settings;
    let probe = Probe::from_code(probe).ok_or(HeaderError::Settings { field: "probe", value: u64::from(probe) })?;
    Ok(SpinSettings { policy: SpinPolicy { spin: std::time::Duration::from_nanos(spin_ns) }, probe })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> (Layout, Vec<u8>) {
        let layout = Layout::new(
            5,
            2,
            3,
            vec![ArraySpec::new(DType::U8, &[2, 3]), ArraySpec::new(DType::I32, &[9])],
            vec![ArraySpec::new(DType::F32, &[2])],
            DType::F64,
        )
        .unwrap()
        .with_info_arena(10_000)
        .unwrap();
        let mut bytes = vec![0u8; HEADER_REGION];
        write(&mut bytes, &layout);
        (layout, bytes)
    }

    #[test]
    fn each_mismatch_names_what_differs() {
        let (layout, mut bytes) = sample();
        let total = layout.total_size();
        assert_eq!(read(&bytes, 100), Err(HeaderError::TooSmall { mapped: 100, needed: HEADER_REGION }));
        assert!(matches!(read(&bytes, HEADER_REGION), Err(HeaderError::TooSmall { .. })));
        bytes[8] = 99; // version
        let e = read(&bytes, total).unwrap_err();
        assert_eq!(e, HeaderError::Version { segment: 99, worker: LAYOUT_VERSION });
        assert!(e.to_string().contains("99 (main process)"));
        let (_, mut bytes) = sample();
        bytes[0] = b'X';
        assert!(matches!(read(&bytes, total), Err(HeaderError::Magic { .. })));
        let (_, mut bytes) = sample();
        let off = std::mem::offset_of!(Header, offsets) + 8 * 5; // slot_stride
        bytes[off] ^= 0x40;
        match read(&bytes, total).unwrap_err() {
            HeaderError::Offset { field, .. } => assert_eq!(field, "slot_stride"),
            e => panic!("unexpected {e}"),
        }
        let (_, mut bytes) = sample();
        let off = std::mem::offset_of!(Header, offsets) + 8 * (FIXED_OFFSETS.len() + 1); // obs[1]
        bytes[off] ^= 0x40;
        match read(&bytes, total).unwrap_err() {
            HeaderError::Offset { field, .. } => assert_eq!(field, "slot.obs[1]"),
            e => panic!("unexpected {e}"),
        }
        let (_, mut bytes) = sample();
        let off = std::mem::offset_of!(Header, leaves);
        bytes[off] = 200;
        assert_eq!(read(&bytes, total), Err(HeaderError::DType { array: "observation", code: 200 }));
        let (_, mut bytes) = sample();
        bytes[std::mem::offset_of!(Header, settings) + std::mem::offset_of!(SettingsBlock, probe)] = 9;
        let e = read_settings(&bytes).unwrap_err();
        assert_eq!(e, HeaderError::Settings { field: "probe", value: 9 });
        assert!(e.to_string().contains("probe"), "{e}");
        assert!(matches!(read_settings(&bytes[..64]), Err(HeaderError::TooSmall { .. })));
    }

    #[test]
    fn layout_and_settings_round_trip_and_settings_default_to_the_default_policy() {
        let (layout, mut bytes) = sample();
        assert_eq!(read(&bytes, layout.total_size()).unwrap(), layout);
        assert_eq!(read_settings(&bytes).unwrap(), SpinSettings::default());
        let settings =
            SpinSettings { policy: SpinPolicy { spin: std::time::Duration::from_nanos(123_456) }, probe: Probe::Yield };
        write_with(&mut bytes, &layout, &settings);
        assert_eq!(read_settings(&bytes).unwrap(), settings);
        assert_eq!(read(&bytes, layout.total_size()).unwrap(), layout, "the layout reads as before");
    }
}
