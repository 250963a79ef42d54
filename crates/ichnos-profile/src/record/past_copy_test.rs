//! Which walks that run off a sample's stack copy count as having gone
//! on past it (the note that suggests a larger `--stack-size`): only
//! those a larger copy would have taken further.

use ichnos_perf::record::{parse, Record};

use super::alloc_test::{format, recorder, sample_here_copying};

#[test]
fn a_walk_off_a_copy_that_the_stacks_end_cut_short_is_not_past_the_copy() {
    let format = format();
    let dir = tempfile::tempdir().unwrap();
    let start = ichnos_perf::monotonic_ns();
    let (mut recorder, writer) = recorder(format, dir.path(), start);
    // Asked for 16 KiB and given 256 bytes, as where the kernel's copy
    // ends at the end of the stack's mapping: more would not have come.
    let short = sample_here_copying(&format, start, 16 << 10, 256);
    // Asked for 256 bytes and given them: the stack went on.
    let whole = sample_here_copying(&format, start + 1, 256, 256);
    for record in [&short, &whole] {
        let Ok(sample @ Record::Sample(_)) = parse(&format, record) else {
            panic!("not a sample");
        };
        recorder.handle(&sample, false);
    }
    assert_eq!(recorder.samples, 2);
    // Both walks ran off their copies (this thread's frames take more
    // than 256 bytes).
    assert_eq!(recorder.complete, 0);
    assert_eq!(recorder.past_copy, 1, "only the copy as long as asked for");
    super::close(recorder.output, writer, 0).unwrap();
}
