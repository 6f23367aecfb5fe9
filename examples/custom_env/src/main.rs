//! The worker binary of this crate: `ringenv.make_vec("custom_env:Sokoban-v0", worker=...)` starts
//! it as a worker, after asking it for the spaces with `custom_env describe Sokoban-v0`.

ringenv_worker::worker_main! {
    "Sokoban-v0" => custom_env::Sokoban::new,       // fn(SokobanArgs) -> Result<Sokoban, String>
    "Sokoban-Tiny-v0" => custom_env::Sokoban::tiny, // no arguments
}
