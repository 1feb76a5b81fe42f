"""The model builders the tests and the benchmarks share (tiny and mid-size random models from
configs, with locally trained tokenizers; no Hub access): decoders and cross-encoders
(`models`), one tiny model per decoder family (`families`), sentence-transformers folders
(`embedding`), multi-vector and sparse folders (`vectors`)."""
