// matvec_after_outputs — the mat-vec's epilogue hook, empty: every module of the mat-vec kernel
// but the last-arriving norm's (matvec_last_norm.wgsl provides the other one)
//
// Math: none; finish (matvec.wgsl) calls it after a workgroup's outputs are stored.
// bindings: none. dispatch: matvec.wgsl's.
// provides: after_outputs

fn after_outputs(n: u32, lanes: Lanes) {}
