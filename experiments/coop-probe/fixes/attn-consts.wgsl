// The host's specialisation of attn_prefill_coop.wgsl for `coop-probe --validate` (one of the
// tiles attn_prefill.rs builds: 4 row blocks, 64 keys a step, head 128 in 8 dim tiles, Q in
// registers); the engine writes these consts ahead of the files (kernel.rs, WgslModule::text).
const HEAD_DIM: u32 = 128u;
const GROUP: u32 = 4u;
const ROW_BLOCKS: u32 = 4u;
const KEY_STEP: u32 = 64u;
const HEAD_TILES: u32 = 8u;
const DIM_SPLIT: u32 = 1u;
const SLACK: u32 = 8u;
const Q_REGS: u32 = 1u;
