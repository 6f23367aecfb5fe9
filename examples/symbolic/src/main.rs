//! The worker binary of this crate: `ringenv.make_vec("symbolic:BlocksWorld-v0", worker=...)`
//! starts it as a worker; `symbolic describe|list|check` answer as every SDK worker binary does.

ringenv_worker::worker_main! {
    "BlocksWorld-v0" => |a: symbolic::BlocksWorldArgs| symbolic::BlocksWorld::try_new(a.num_blocks),
}
