//! sluice's block dequantization equals llama.cpp's (gguf-py's numpy reference) bit for
//! bit, on random blocks of every format and on the first blocks of two SmolLM2 tensors.
//! The fixture (a GGUF file written by gguf-py's writer, so this also reads a foreign
//! file) was made by `scripts/quant_fixture.py`.

use sluice_kernels::{dequantize, WeightDtype};
use sluice_llm::gguf::GgufFile;

#[test]
fn dequantize_matches_gguf_py_bit_for_bit() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/quant_blocks.gguf"
    );
    let g = GgufFile::open(path).unwrap();
    let mut checked = 0;
    let mut elems = 0;
    for name in [
        "q8_0",
        "q4_0",
        "q4_1",
        "q5_0",
        "q5_1",
        "q4_k",
        "q5_k",
        "q6_k",
        "smol.q8_0",
        "smol.q4_1",
    ] {
        let fmt = name.trim_start_matches("smol.");
        let dt = WeightDtype::from_name(fmt).unwrap();
        let q = g.tensor(&format!("{name}.q")).unwrap();
        let f = g.tensor(&format!("{name}.f32")).unwrap();
        let bytes = g.tensor_bytes(q);
        let want: Vec<u32> = g
            .tensor_bytes(f)
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        assert_eq!(bytes.len() % dt.block_bytes(), 0, "{name}");
        let n = bytes.len() / dt.block_bytes() * dt.block_elems();
        assert_eq!(n, want.len(), "{name}: element count");
        let got = dequantize(dt, 1, n, bytes);
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(
                g.to_bits(),
                *w,
                "{name}[{i}]: sluice {g:e}, gguf-py {:e}",
                f32::from_bits(*w)
            );
        }
        checked += 1;
        elems += n;
    }
    assert_eq!(checked, 10);
    assert_eq!(elems, 5 * 128 + 3 * 512 + 2 * 128);
}
