//! A recording file from anywhere: read chunk by chunk, every record
//! decoded and its stack frames walked. Errors, never panics; memory
//! bounded by the chunk limit. The same bytes are also decoded as one
//! record's body (kind: the first byte), which mutations of whole files
//! rarely reach past the chunks' checksums.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Some((&kind, body)) = data.split_first() {
        if let Ok(record) = ichnos_data::record::decode(kind, body) {
            if let ichnos_data::Record::Stack(s) = record {
                let _ = s.frames.iter().count();
            }
        }
    }
    let Ok(mut reader) = ichnos_data::Reader::new(data) else {
        return;
    };
    while let Ok(Some(chunk)) = reader.next_chunk() {
        for record in chunk.records().flatten() {
            if let ichnos_data::Record::Stack(s) = record {
                let _ = s.frames.iter().count();
            }
        }
    }
});
