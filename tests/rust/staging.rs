//! GPU staging (`ringenv_runtime::staging`, cargo feature `cuda`).
//!
//! Without the feature: the build carries no CUDA symbol at all. With it: the driver is named in
//! the binary only as a name to load at run time; without a driver, asking for a device is a
//! typed error; against a stand-in driver (`support/fake_libcuda.c`, built with `cc` and loaded
//! in a child process), every call path runs on any machine, both pinning modes included, and
//! releases all it acquired; with a real device, a pool segment's slot makes a round trip host →
//! device → host through [`CudaStaging`] on a stream of its own.
//!
//! `cargo test -p ringenv-runtime --test staging` runs the first; `cargo test -p ringenv-runtime
//! --features cuda --test staging` the others. (A workspace-wide `cargo test` builds the runtime
//! with `cuda` on, since the Python bindings enable it.)

/// Whether this test binary holds the name of a CUDA driver function.
fn binary_mentions_cuda() -> bool {
    let exe = std::env::current_exe().expect("the test binary's path");
    let bytes = std::fs::read(&exe).expect("read the test binary");
    // Spelled backwards so that this file does not put the name in the binary itself.
    let name: Vec<u8> = b"retsigeRtsoHmeMuc".iter().rev().copied().collect();
    bytes.windows(name.len()).any(|w| w == name.as_slice())
}

#[cfg(not(feature = "cuda"))]
#[test]
fn without_the_feature_no_cuda_symbol_is_built_in() {
    assert!(!binary_mentions_cuda(), "a build without the `cuda` feature names a CUDA driver function");
}

#[cfg(feature = "cuda")]
mod cuda {
    use super::binary_mentions_cuda;
    use cudarc::driver::{CudaContext, DevicePtr};
    use ringenv_runtime::{
        cuda_device_count as device_count, cuda_driver_present as driver_present, CudaStaging, HostToDevice, PinMode,
        StagingError,
    };
    use ringenv_runtime::{Array, ArraySpec, DType, Layout, Segment};
    use ringenv_runtime::{HeapMemory, Memory};

    #[test]
    fn the_driver_is_loaded_by_name_at_run_time() {
        // The names are in the binary (to be looked up with dlsym); the binary itself starts on
        // machines with no libcuda at all, which is how CI runs this file.
        assert!(binary_mentions_cuda());
    }

    /// The device to test on, or `None` after printing why there is none.
    fn device() -> Option<usize> {
        if !driver_present() {
            assert_eq!(CudaStaging::new(0, 2).err(), Some(StagingError::NoDriver));
            eprintln!("skipped: no CUDA device: libcuda.so.1 not found");
            return None;
        }
        let count = device_count().expect("device count");
        if count == 0 {
            assert_eq!(CudaStaging::new(0, 2).err(), Some(StagingError::NoDevice { ordinal: 0, count: 0 }));
            eprintln!("skipped: no CUDA device: the driver sees none");
            return None;
        }
        Some(0)
    }

    #[test]
    fn a_slot_of_a_segment_makes_a_round_trip_through_the_device() {
        let Some(ordinal) = device() else { return };
        let num_envs = 64;
        let layout = Layout::single(
            num_envs,
            1,
            2,
            ArraySpec::new(DType::F32, &[8]),
            ArraySpec::new(DType::I64, &[]),
            DType::F32,
        )
        .unwrap();
        let mut segment = Segment::create(layout).unwrap();
        let memory = segment.memory();
        let mut staging = CudaStaging::new(ordinal, 2).unwrap();
        // SAFETY: `segment` (and `memory`) outlive `staging`, declared after them.
        let mode = unsafe { staging.register(memory.as_ptr(), memory.len()) }.unwrap();
        eprintln!("pinned the memfd segment: {mode:?} {:?}", staging.fallback_reason());
        assert_eq!(staging.host_range(), Some((memory.as_ptr() as usize, memory.len())));

        // Distinct bytes in both slots' observations.
        let bytes = num_envs * 8 * 4;
        for slot in 0..2 {
            let mut view = segment.slot_mut(slot);
            for (i, b) in view.rows_mut(Array::Obs(0), 0..num_envs).iter_mut().enumerate() {
                *b = (i * 7 + slot * 13) as u8;
            }
        }
        let expected: Vec<Vec<u8>> =
            (0..2).map(|s| segment.slot(s).rows(Array::Obs(0), 0..num_envs).to_vec()).collect();

        let ctx = CudaContext::new(ordinal).unwrap();
        let stream = ctx.new_stream().unwrap();
        let raw_stream = stream.cu_stream() as usize as u64;
        let targets = [stream.alloc_zeros::<u8>(bytes).unwrap(), stream.alloc_zeros::<u8>(bytes).unwrap()];
        stream.synchronize().unwrap();
        for (slot, target) in targets.iter().enumerate() {
            let (dst, _sync) = target.device_ptr(&stream);
            let copy = HostToDevice { host: segment.slot(slot).address(Array::Obs(0)), device: dst, bytes };
            // SAFETY: `target` is device memory of the primary context, used by nothing else.
            unsafe { staging.copy_to_device(slot, &[copy], raw_stream) }.unwrap();
        }
        for slot in 0..2 {
            staging.wait_slot(slot).unwrap();
            assert!(staging.is_done(slot).unwrap());
            if mode == PinMode::Registered {
                // The workers may rewrite the slot now; the device copy keeps the old values.
                segment.slot_mut(slot).rows_mut(Array::Obs(0), 0..num_envs).fill(0xAB);
            }
        }
        for (slot, target) in targets.iter().enumerate() {
            let mut back = vec![0u8; bytes];
            let (src, _sync) = target.device_ptr(&stream);
            // SAFETY: device memory of the primary context; `back` is ours.
            unsafe { staging.copy_to_host(src, back.as_mut_ptr() as usize, bytes, raw_stream) }.unwrap();
            assert_eq!(back, expected[slot], "slot {slot}");
        }
    }

    /// Set in the child processes that run against the fake driver.
    const FAKE_CHILD: &str = "RINGENV_TEST_FAKE_LIBCUDA";

    /// Builds `support/fake_libcuda.c` into a fresh directory of test `name`, or prints why it
    /// cannot.
    fn build_fake_driver(name: &str) -> Option<std::path::PathBuf> {
        let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/rust/support/fake_libcuda.c");
        let test = name.replace("::", "-");
        let dir = std::env::temp_dir().join(format!("ringenv-fake-libcuda-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
        let built = std::process::Command::new(&cc)
            .args(["-shared", "-fPIC", "-o"])
            .arg(dir.join("libcuda.so"))
            .arg(&source)
            .status();
        match built {
            Ok(status) if status.success() => Some(dir),
            other => {
                eprintln!("skipped: no C compiler to build the fake CUDA driver ({cc}: {other:?})");
                None
            }
        }
    }

    /// Runs test `name` of this binary in a child process whose `libcuda.so` is the fake, with
    /// `env`, and checks that it passed and released everything it acquired.
    fn run_against_fake_driver(name: &str, env: &[(&str, &str)]) {
        let Some(dir) = build_fake_driver(name) else { return };
        let output = std::process::Command::new(std::env::current_exe().unwrap())
            .args([name, "--exact", "--nocapture", "--test-threads=1"])
            .env("LD_LIBRARY_PATH", &dir)
            .env(FAKE_CHILD, "1")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let text = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert!(output.status.success(), "{name} against the fake driver failed:\n{text}");
        assert!(text.contains("test result: ok. 1 passed"), "{name} did not run:\n{text}");
        let balance: Vec<&str> = text.lines().filter(|l| l.starts_with("fake libcuda:")).collect();
        let released = "fake libcuda: retained=0 events=0 registered=0 host_allocs=0 contexts_pushed=0";
        assert!(
            !balance.is_empty() && balance.iter().all(|l| *l == released),
            "{name} left driver objects behind:\n{text}"
        );
    }

    /// Copies rows 3..7 of both slots' observations to "device memory" (host memory, under the
    /// fake driver) and back, in the pinning mode the driver allows.
    fn stage_through_the_fake_driver(expected: PinMode) {
        assert!(driver_present());
        assert_eq!(device_count(), Ok(1));
        assert_eq!(CudaStaging::new(1, 2).err(), Some(StagingError::NoDevice { ordinal: 1, count: 1 }));
        let num_envs = 10;
        let layout = Layout::single(
            num_envs,
            1,
            2,
            ArraySpec::new(DType::F32, &[3]),
            ArraySpec::new(DType::I64, &[]),
            DType::F64,
        )
        .unwrap();
        let mut segment = Segment::create(layout).unwrap();
        let memory = segment.memory();
        let mut staging = CudaStaging::new(0, 2).unwrap();
        // SAFETY: `segment` outlives `staging`, dropped explicitly below.
        assert_eq!(unsafe { staging.register(memory.as_ptr(), memory.len()) }, Ok(expected));
        match (expected, staging.fallback_reason()) {
            (PinMode::Registered, None) => {}
            (PinMode::StagingBuffer, Some(StagingError::Driver { call: "cuMemHostRegister", name, .. })) => {
                assert_eq!(name, "CUDA_ERROR_NOT_PERMITTED")
            }
            other => panic!("unexpected pinning {other:?}"),
        }
        let row = 3 * 4;
        let mut device = [vec![0u8; 4 * row], vec![0u8; 4 * row]];
        for (slot, device) in device.iter_mut().enumerate() {
            for (i, b) in segment.slot_mut(slot).rows_mut(Array::Obs(0), 0..num_envs).iter_mut().enumerate() {
                *b = (i + 100 * slot) as u8;
            }
            let host = segment.slot(slot).address(Array::Obs(0)) + 3 * row;
            let copy = HostToDevice { host, device: device.as_mut_ptr() as u64, bytes: 4 * row };
            // SAFETY: under the fake driver, "device memory" is `device`.
            unsafe { staging.copy_to_device(slot, &[copy], 0x1234) }.unwrap();
            assert!(staging.is_done(slot).unwrap());
            staging.wait_slot(slot).unwrap();
            let expected_rows = segment.slot(slot).rows(Array::Obs(0), 3..7).to_vec();
            assert_eq!(*device, expected_rows, "slot {slot}");
            let mut back = vec![0u8; 4 * row];
            // SAFETY: as above; `back` is ours.
            unsafe { staging.copy_to_host(device.as_ptr() as u64, back.as_mut_ptr() as usize, back.len(), 7) }.unwrap();
            assert_eq!(back, expected_rows);
        }
        // A failing copy names the call and the driver's error.
        let bad = HostToDevice { host: segment.slot(0).address(Array::Obs(0)), device: 0, bytes: 4 };
        // SAFETY: the fake driver refuses the null device pointer.
        match unsafe { staging.copy_to_device(0, &[bad], 0) } {
            Err(StagingError::Driver { call: "cuMemcpyHtoDAsync", code: 1, name, .. }) => {
                assert_eq!(name, "CUDA_ERROR_INVALID_VALUE")
            }
            other => panic!("expected a cuMemcpyHtoDAsync error, got {other:?}"),
        }
        drop(staging);
        drop(memory);
    }

    #[test]
    fn fake_driver_registered_segment() {
        if std::env::var_os(FAKE_CHILD).is_some() {
            return stage_through_the_fake_driver(PinMode::Registered);
        }
        run_against_fake_driver("cuda::fake_driver_registered_segment", &[]);
    }

    #[test]
    fn fake_driver_refusing_to_register_falls_back_to_a_pinned_mirror() {
        if std::env::var_os(FAKE_CHILD).is_some() {
            return stage_through_the_fake_driver(PinMode::StagingBuffer);
        }
        run_against_fake_driver(
            "cuda::fake_driver_refusing_to_register_falls_back_to_a_pinned_mirror",
            &[("FAKE_CUDA_REGISTER_FAILS", "1")],
        );
    }

    #[test]
    fn fake_driver_copies_in_flight_and_no_devices() {
        if std::env::var_os(FAKE_CHILD).is_some() {
            let mut staging = CudaStaging::new(0, 2).unwrap();
            let memory = HeapMemory::new(4096);
            // SAFETY: `staging` is dropped before `memory`.
            unsafe { staging.register(memory.as_ptr(), memory.len()) }.unwrap();
            let mut device = [0u8; 16];
            let copy = HostToDevice { host: memory.as_ptr() as usize, device: device.as_mut_ptr() as u64, bytes: 16 };
            assert!(staging.is_done(1).unwrap(), "a slot never copied is done");
            // SAFETY: fake "device memory".
            unsafe { staging.copy_to_device(1, &[copy], 0) }.unwrap();
            assert!(!staging.is_done(1).unwrap(), "the fake driver reports the copy in flight");
            drop(staging);
            drop(memory);
            return;
        }
        run_against_fake_driver("cuda::fake_driver_copies_in_flight_and_no_devices", &[("FAKE_CUDA_NOT_READY", "1")]);
    }

    #[test]
    fn fake_driver_with_no_device() {
        if std::env::var_os(FAKE_CHILD).is_some() {
            assert_eq!(device_count(), Ok(0));
            assert_eq!(CudaStaging::new(0, 2).err(), Some(StagingError::NoDevice { ordinal: 0, count: 0 }));
            return;
        }
        run_against_fake_driver("cuda::fake_driver_with_no_device", &[("FAKE_CUDA_DEVICES", "0")]);
    }

    #[test]
    fn bad_arguments_are_refused_before_the_driver_is_called() {
        let Some(ordinal) = device() else { return };
        let mut staging = CudaStaging::new(ordinal, 2).unwrap();
        let copy = HostToDevice { host: 4096, device: 0, bytes: 8 };
        // SAFETY: refused before any copy is enqueued.
        let e = unsafe { staging.copy_to_device(0, &[copy], 0) }.unwrap_err();
        assert!(e.to_string().contains("register host memory"), "{e}");
        let memory = HeapMemory::new(8192);
        // SAFETY: `staging` is dropped before `memory` (explicitly, below).
        unsafe { staging.register(memory.as_ptr(), memory.len()) }.unwrap();
        let outside = HostToDevice { host: memory.as_ptr() as usize + 8190, device: 0, bytes: 8 };
        // SAFETY: refused before any copy is enqueued.
        let e = unsafe { staging.copy_to_device(0, &[outside], 0) }.unwrap_err();
        assert!(e.to_string().contains("not inside the registered memory"), "{e}");
        assert!(matches!(staging.wait_slot(2), Err(StagingError::InvalidArgument(_))));
        drop(staging);
        drop(memory);
    }
}
