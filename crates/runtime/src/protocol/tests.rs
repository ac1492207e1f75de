//! Round trips, malformed frames, limits and stalls.

use super::*;

#[tokio::test]
async fn streamed_step_reads_header_then_values() {
    let params: Vec<f32> = (0..1000).map(|i| i as f32 * 0.25 - 3.0).collect();
    let step = Message::Step {
        task: 4,
        iteration: 9,
        version: 2,
        stream_start: 77,
        len: 13,
        params: Some(params.clone()),
    };
    let (mut wire, mut next) = (Vec::new(), Vec::new());
    step.encode(&mut wire);
    Message::Shutdown { reason: "x".into() }.encode(&mut next);
    wire.extend_from_slice(&next);
    let mut r = &wire[..];
    let mut buf = Vec::new();
    let (m, count) = read_message_streaming_step(&mut r, &mut buf, "p", "t")
        .await
        .unwrap();
    assert_eq!(count, Some(1000));
    let mut got = vec![0.0f32; 1000];
    read_f32s(&mut r, &mut got[..300], "p", "t").await.unwrap();
    read_f32s(&mut r, &mut got[300..], "p", "t").await.unwrap();
    assert_eq!(got, params);
    match m {
        Message::Step {
            task,
            iteration,
            version,
            stream_start,
            len,
            params,
        } => {
            assert_eq!(
                (task, iteration, version, stream_start, len),
                (4, 9, 2, 77, 13)
            );
            assert_eq!(params, Some(vec![]));
        }
        other => panic!("{other:?}"),
    }
    let (m, count) = read_message_streaming_step(&mut r, &mut buf, "p", "t")
        .await
        .unwrap();
    assert_eq!((m, count), (Message::Shutdown { reason: "x".into() }, None));
    // A Gradient written as head + values reads back as the whole message.
    let g = Message::Gradient {
        task: 3,
        iteration: 5,
        len: 7,
        loss_sum: 1.5,
        correct: 2,
        timing: StepTiming {
            cpu_s: 0.25,
            ..Default::default()
        },
        signals: Signals::default(),
        first: 0,
        grad: vec![],
    };
    let mut head = Vec::new();
    encode_gradient_head(&g, 3, &mut head);
    head.extend_from_slice(bytemuck::cast_slice(&[1.0f32, -2.0, 0.5]));
    let mut r = &head[..];
    let (m, count) = read_message_streaming_step(&mut r, &mut buf, "p", "t")
        .await
        .unwrap();
    assert_eq!((m, count), (g.clone(), Some(3)));
    let mut v = vec![0.0f32; 3];
    read_f32s(&mut r, &mut v, "p", "t").await.unwrap();
    assert_eq!(v, [1.0, -2.0, 0.5]);
    let mut whole = Vec::new();
    let mut full = g;
    let Message::Gradient { grad, .. } = &mut full else {
        unreachable!()
    };
    *grad = v;
    full.encode(&mut whole);
    assert_eq!(whole, head);
    // So does a GradientPart.
    let part = Message::GradientPart {
        task: 3,
        iteration: 5,
        offset: 12,
        values: vec![],
    };
    let mut head = Vec::new();
    encode_gradient_head(&part, 2, &mut head);
    head.extend_from_slice(bytemuck::cast_slice(&[4.0f32, 8.0]));
    let mut r = &head[..];
    let (m, count) = read_message_streaming_step(&mut r, &mut buf, "p", "t")
        .await
        .unwrap();
    assert_eq!((m, count), (part, Some(2)));
    let mut v = vec![0.0f32; 2];
    read_f32s(&mut r, &mut v, "p", "t").await.unwrap();
    assert_eq!(v, [4.0, 8.0]);
    // A Step whose count disagrees with its length is refused, naming the field.
    let mut bad = Vec::new();
    Message::Step {
        task: 1,
        iteration: 1,
        version: 1,
        stream_start: 0,
        len: 1,
        params: Some(vec![1.0; 4]),
    }
    .encode(&mut bad);
    bad[4 + STEP_PARAMS_AT - 4] = 9;
    let mut r = &bad[..];
    let e = read_message_streaming_step(&mut r, &mut buf, "p", "t")
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("Step") && e.contains("params"), "{e}");
}

fn roundtrip(m: Message) {
    let mut buf = Vec::new();
    m.encode(&mut buf);
    let len = u32::from_le_bytes(buf[..4].try_into().unwrap()) as usize;
    assert_eq!(len, buf.len() - 4);
    assert_eq!(Message::decode(&buf[4..], "t").unwrap(), m);
}

#[test]
fn every_message_roundtrips() {
    roundtrip(Message::Hello {
        version: VERSION,
        name: "w0".into(),
    });
    roundtrip(Message::Welcome {
        worker_id: 3,
        job: JobSpec {
            dataset: "tiny".into(),
            fingerprint: 99,
            n_train: 2000,
            model: ModelSpec {
                kind: crate::model::ModelKind::Mlp,
                dim: 64,
                classes: 10,
                width: 32,
            },
            stream_seed: 7,
            n_params: 1234,
        },
    });
    roundtrip(Message::Reject {
        reason: "no".into(),
    });
    roundtrip(Message::Ready {
        fingerprint: 1,
        n_train: 2,
    });
    roundtrip(Message::Step {
        task: 1,
        iteration: 2,
        version: 3,
        stream_start: 4,
        len: 5,
        params: Some(vec![1.0, -2.5]),
    });
    roundtrip(Message::Step {
        task: 1,
        iteration: 2,
        version: 3,
        stream_start: 4,
        len: 5,
        params: None,
    });
    roundtrip(Message::Gradient {
        task: 1,
        iteration: 2,
        len: 3,
        loss_sum: 4.5,
        correct: 2,
        timing: StepTiming {
            cpu_s: 0.1,
            ..Default::default()
        },
        signals: Signals {
            slowdown: 2.0,
            ..Default::default()
        },
        first: 5,
        grad: vec![0.25; 7],
    });
    roundtrip(Message::GradientPart {
        task: 1,
        iteration: 2,
        offset: 0,
        values: vec![0.5; 5],
    });
    roundtrip(Message::Shutdown {
        reason: "done".into(),
    });
    roundtrip(Message::Error {
        message: "x".into(),
    });
}

#[test]
fn split_step_frame_equals_whole_frame() {
    let params = vec![1.0f32, 2.0, 3.0];
    let mut whole = Vec::new();
    Message::Step {
        task: 9,
        iteration: 8,
        version: 7,
        stream_start: 6,
        len: 5,
        params: Some(params.clone()),
    }
    .encode(&mut whole);
    let mut tail = Vec::new();
    encode_params_tail(&params, &mut tail);
    let mut split = step_frame_header(9, 8, 7, 6, 5, tail.len());
    split.extend_from_slice(&tail);
    assert_eq!(whole, split);
}

#[test]
fn malformed_frames_are_named_errors() {
    // every strict prefix of a valid Gradient fails with Truncated, never panics
    let mut buf = Vec::new();
    Message::Gradient {
        task: 1,
        iteration: 2,
        len: 3,
        loss_sum: 4.5,
        correct: 2,
        timing: StepTiming::default(),
        signals: Signals::default(),
        first: 0,
        grad: vec![0.25; 3],
    }
    .encode(&mut buf);
    for cut in 5..buf.len() {
        let e = Message::decode(&buf[4..cut], "peer").unwrap_err();
        assert!(
            matches!(e, ProtocolError::Truncated { .. }),
            "cut {cut}: {e}"
        );
    }
    let e = Message::decode(&[42, 0, 0], "peer")
        .unwrap_err()
        .to_string();
    assert!(e.contains("unknown frame kind 42"), "{e}");
    // a vector whose count claims more than the frame holds
    let mut b = vec![kind::ERROR];
    b.extend_from_slice(&u32::MAX.to_le_bytes());
    let e = Message::decode(&b, "peer").unwrap_err().to_string();
    assert!(
        e.contains("Error frame: field `message` is truncated"),
        "{e}"
    );
    let e = Message::decode(&[], "peer").unwrap_err();
    assert!(matches!(e, ProtocolError::Empty { .. }));
}

#[test]
fn old_version_and_foreign_magic_are_refused() {
    let mut b = vec![kind::HELLO];
    b.extend_from_slice(&MAGIC);
    b.extend_from_slice(&0u16.to_le_bytes());
    let e = Message::decode(&b, "10.0.0.1:5").unwrap_err().to_string();
    assert!(
        e.contains("protocol version 0") && e.contains("version 2"),
        "{e}"
    );
    let mut b = vec![kind::HELLO];
    b.extend_from_slice(b"GET ");
    let e = Message::decode(&b, "x").unwrap_err().to_string();
    // The bytes as text, not a Debug array of numbers.
    assert!(e.contains(r#"bad magic "GET ", expected "PACR""#), "{e}");
}

#[tokio::test]
async fn a_stalled_large_frame_pins_only_what_arrived() {
    use tokio::io::AsyncWriteExt;
    // Announces the largest frame any reader accepts, sends 1000 bytes, stalls.
    let (mut peer, mut me) = tokio::io::duplex(1 << 16);
    let mut f = MAX_FRAME.to_le_bytes().to_vec();
    f.push(kind::STEP);
    f.extend(vec![0u8; 1000]);
    peer.write_all(&f).await.unwrap();
    let limits = Limits {
        max_frame: MAX_FRAME,
        stall: Some(std::time::Duration::from_millis(100)),
    };
    let mut buf = Vec::new();
    let e = read_frame_with(&mut me, &mut buf, limits, "worker x", "reading a Gradient")
        .await
        .unwrap_err();
    assert!(matches!(e, ProtocolError::Timeout { .. }), "{e}");
    let e = e.to_string();
    assert!(
        e.contains("worker x") && e.contains("100ms") && e.contains("reading a Gradient"),
        "{e}"
    );
    // Once the buffer held 256 MiB here, zero-filled, for as long as the peer
    // stalled.
    assert!(buf.capacity() <= 2 * READ_CHUNK, "{}", buf.capacity());
    // The streaming reader too, on a frame that is not streamed.
    let mut f = MAX_FRAME.to_le_bytes().to_vec();
    f.push(kind::ERROR);
    f.extend(vec![0u8; 1000]);
    peer.write_all(&f).await.unwrap();
    let mut buf = Vec::new();
    let e = read_message_streaming_step_with(&mut me, &mut buf, limits, "p", "t")
        .await
        .unwrap_err();
    assert!(matches!(e, ProtocolError::Timeout { .. }), "{e}");
    assert!(buf.capacity() <= 2 * READ_CHUNK, "{}", buf.capacity());
}

#[tokio::test]
async fn frames_are_limited_by_what_the_job_needs() {
    let stall = std::time::Duration::from_secs(5);
    let n = 100_000;
    let limits = Limits::for_job(n, stall);
    assert!(limits.max_frame < MAX_FRAME);
    let gradient = |values: usize| {
        let mut f = Vec::new();
        Message::Gradient {
            task: 1,
            iteration: 1,
            len: 3,
            loss_sum: 0.0,
            correct: 0,
            timing: StepTiming::default(),
            signals: Signals::default(),
            first: 0,
            grad: vec![0.5; values],
        }
        .encode(&mut f);
        f
    };
    // The whole gradient of the job fits; so does a Step with all the parameters.
    let f = gradient(n);
    let mut buf = Vec::new();
    let (_, count) = read_message_streaming_step_with(&mut &f[..], &mut buf, limits, "p", "t")
        .await
        .unwrap();
    assert_eq!(count, Some(n));
    let mut f = Vec::new();
    Message::Step {
        task: 1,
        iteration: 1,
        version: 1,
        stream_start: 0,
        len: 1,
        params: Some(vec![1.0; n]),
    }
    .encode(&mut f);
    read_message_streaming_step_with(&mut &f[..], &mut buf, limits, "p", "t")
        .await
        .unwrap();
    // More than the job can need is refused from the length prefix alone.
    let f = gradient(n + 1000);
    let e = read_message_streaming_step_with(&mut &f[..4], &mut buf, limits, "worker y", "t")
        .await
        .unwrap_err();
    assert!(matches!(e, ProtocolError::TooLarge { .. }), "{e}");
    let e = e.to_string();
    assert!(
        e.contains("worker y") && e.contains(&format!("limit of {} bytes", limits.max_frame)),
        "{e}"
    );
    // Before Hello: a few KiB at most.
    let big_hello = (MAX_HELLO_FRAME + 1).to_le_bytes();
    let e = read_frame_with(
        &mut &big_hello[..],
        &mut buf,
        Limits::hello(stall),
        "p",
        "t",
    )
    .await
    .unwrap_err();
    assert!(matches!(e, ProtocolError::TooLarge { limit, .. } if limit == MAX_HELLO_FRAME));
    // A tiny model still gets room for control messages.
    assert_eq!(Limits::for_job(10, stall).max_frame, MAX_CONTROL_FRAME);
}

#[tokio::test]
async fn oversized_length_is_refused_before_allocating() {
    let bytes = (MAX_FRAME + 1).to_le_bytes();
    let mut r = &bytes[..];
    let mut buf = Vec::new();
    let e = read_frame(&mut r, &mut buf, "p", "waiting")
        .await
        .unwrap_err();
    assert!(matches!(e, ProtocolError::TooLarge { .. }));
    assert!(buf.capacity() < 1024);
}

#[test]
fn an_unknown_model_kind_is_refused_at_decode() {
    let mut buf = Vec::new();
    Message::Welcome {
        worker_id: 1,
        job: JobSpec {
            dataset: "tiny".into(),
            fingerprint: 7,
            n_train: 10,
            model: crate::model::ModelSpec {
                kind: crate::model::ModelKind::Kmeans,
                dim: 4,
                classes: 2,
                width: 3,
            },
            stream_seed: 1,
            n_params: 12,
        },
    }
    .encode(&mut buf);
    assert!(Message::decode(&buf[4..], "peer").is_ok());
    // The kind byte follows worker id, dataset, fingerprint and n_train.
    let at = 4 + 1 + 4 + (4 + 4) + 8 + 8;
    assert_eq!(buf[at], crate::model::ModelKind::Kmeans.wire_id());
    buf[at] = 9;
    let e = Message::decode(&buf[4..], "peer").unwrap_err().to_string();
    assert!(
        e.contains("model.kind") && e.contains("unknown model kind 9") && e.contains("2 (mlp)"),
        "{e}"
    );
}
