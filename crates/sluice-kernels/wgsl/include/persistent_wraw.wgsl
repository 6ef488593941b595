// The weight accessor of the persistent block-format matvec ops (the dtype snippets'
// `wraw`), one for every format of a kernel: each op sets the matrices before it reads.

// The matrices `wraw(sel, ..)` reads: wm_a (sel false), wm_b (sel true, gate/up's up).
var<private> wm_a: u32;
var<private> wm_b: u32;

// Vec4 i of the op's matrix.
fn wraw(sel: bool, i: u32) -> vec4<u32> {
    return w_load(select(wm_a, wm_b, sel), i);
}
