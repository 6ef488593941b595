#!/usr/bin/env python3
"""Vocabulary fixtures for the tokenizer tests (crates/sluice-llm/tests/tokenizer_vocab.rs).

  vocab_fixture.py extract MODEL.gguf OUT.gguf.gz
      Writes a vocabulary-only GGUF (v3, no tensors): general.architecture/name and every
      tokenizer.* key of MODEL.gguf, gzip-compressed.
  vocab_fixture.py expect VOCAB.gguf[.gz] PROMPTS.json
      For a byte-level BPE vocabulary with pre-tokenizer `smollm`, rebuilds the Hugging Face
      tokenizer.json SmolLM2 ships (Digits(individual) + ByteLevel, BPE with the GGUF merges,
      control tokens as special added tokens) and fills the "ids" of every entry of
      PROMPTS.json whose "source" is "hf-tokenizers" with what the `tokenizers` package
      (pip install tokenizers) gives; entries with another source (ids from llama.cpp's
      llama-tokenize) are left alone.
Only the Python standard library is needed for `extract`.
"""
import gzip, io, json, struct, sys

TYPES = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: '?', 10: 'Q', 11: 'q', 12: 'd'}


def read_gguf_meta(data):
    f = io.BytesIO(data)
    rd = lambda fmt: struct.unpack('<' + fmt, f.read(struct.calcsize(fmt)))[0]
    assert f.read(4) == b'GGUF', 'not a GGUF file'
    version = rd('I')
    assert version in (2, 3), f'GGUF version {version}'
    rd('Q')  # tensors
    n_kv = rd('Q')

    def rstr():
        return f.read(rd('Q')).decode('utf-8')

    def rval(t):
        if t in TYPES:
            return rd(TYPES[t])
        if t == 8:
            return rstr()
        if t == 9:
            et, n = rd('I'), rd('Q')
            return (et, [rval(et) for _ in range(n)])
        raise ValueError(f'type {t}')

    meta = []
    for _ in range(n_kv):
        k = rstr()
        t = rd('I')
        meta.append((k, t, rval(t)))
    return meta


def write_gguf_meta(meta):
    out = io.BytesIO()
    w = lambda fmt, v: out.write(struct.pack('<' + fmt, v))

    def wstr(s):
        b = s.encode('utf-8')
        w('Q', len(b))
        out.write(b)

    def wval(t, v):
        if t in TYPES:
            w(TYPES[t], v)
        elif t == 8:
            wstr(v)
        elif t == 9:
            et, items = v
            w('I', et)
            w('Q', len(items))
            for x in items:
                wval(et, x)
        else:
            raise ValueError(t)

    out.write(b'GGUF')
    w('I', 3)
    w('Q', 0)
    w('Q', len(meta))
    for k, t, v in meta:
        wstr(k)
        w('I', t)
        wval(t, v)
    pad = (-out.tell()) % 32
    out.write(b'\0' * pad)
    return out.getvalue()


def load(path):
    data = open(path, 'rb').read()
    if path.endswith('.gz'):
        data = gzip.decompress(data)
    return read_gguf_meta(data)


def extract(src, dst):
    keep = [(k, t, v) for k, t, v in load(src)
            if k.startswith('tokenizer.') or k in ('general.architecture', 'general.name')]
    data = write_gguf_meta(keep)
    with open(dst, 'wb') as f:
        f.write(gzip.compress(data, 9, mtime=0))
    print(f'{dst}: {len(keep)} keys, {len(data)} bytes before gzip')


def smollm_tokenizer(meta):
    from tokenizers import Tokenizer
    m = {k: v for k, t, v in meta}
    assert m['tokenizer.ggml.model'] == 'gpt2' and m['tokenizer.ggml.pre'] == 'smollm'
    tokens = m['tokenizer.ggml.tokens'][1]
    types = m['tokenizer.ggml.token_type'][1]
    merges = m['tokenizer.ggml.merges'][1]
    j = {
        'version': '1.0',
        'added_tokens': [
            {'id': i, 'content': tok, 'single_word': False, 'lstrip': False, 'rstrip': False,
             'normalized': False, 'special': True}
            for i, (tok, ty) in enumerate(zip(tokens, types)) if ty == 3
        ],
        'normalizer': None,
        'pre_tokenizer': {'type': 'Sequence', 'pretokenizers': [
            {'type': 'Digits', 'individual_digits': True},
            {'type': 'ByteLevel', 'add_prefix_space': False, 'trim_offsets': True, 'use_regex': True},
        ]},
        'post_processor': None,
        'decoder': {'type': 'ByteLevel', 'add_prefix_space': True, 'trim_offsets': True, 'use_regex': True},
        'model': {'type': 'BPE', 'dropout': None, 'unk_token': None, 'continuing_subword_prefix': None,
                  'end_of_word_suffix': None, 'fuse_unk': False, 'byte_fallback': False,
                  'vocab': {tok: i for i, tok in enumerate(tokens)},
                  'merges': merges},
    }
    return Tokenizer.from_str(json.dumps(j))


def expect(vocab, prompts_path):
    import tokenizers
    tk = smollm_tokenizer(load(vocab))
    prompts = json.load(open(prompts_path))
    for p in prompts['prompts']:
        if p.get('source', 'hf-tokenizers').startswith('hf-tokenizers'):
            tk.encode_special_tokens = not p.get('parse_special', True)
            p['ids'] = tk.encode(p['text'], add_special_tokens=False).ids
            p['source'] = f'hf-tokenizers {tokenizers.__version__}'
    with open(prompts_path, 'w') as f:
        json.dump(prompts, f, ensure_ascii=False, indent=1)
        f.write('\n')
    print(f'{prompts_path}: {len(prompts["prompts"])} prompts')


if __name__ == '__main__':
    cmd = sys.argv[1] if len(sys.argv) > 1 else ''
    if cmd == 'extract' and len(sys.argv) == 4:
        extract(sys.argv[2], sys.argv[3])
    elif cmd == 'expect' and len(sys.argv) == 4:
        expect(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
