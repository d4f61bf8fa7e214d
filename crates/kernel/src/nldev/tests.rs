use super::testing::*;
use super::*;

const SAMPLES: &str = include_str!("../../../../tests/fixtures/captures/rdma-netlink-samples.txt");

/// The hex dumps of the captures file, by sample number: `## N. ...` starts a sample and
/// `0010  08 00 ...` lines hold its bytes at the given offset.
fn samples() -> Vec<(u32, Vec<u8>)> {
    let mut out: Vec<(u32, Vec<u8>)> = Vec::new();
    for line in SAMPLES.lines() {
        if let Some(rest) = line.strip_prefix("## ") {
            // "## 5. reply part ..." starts sample 5; "##    (no rkey/lkey) ..." continues its title.
            if let Some(Ok(number)) = rest.split_once(". ").map(|(n, _)| n.parse()) {
                out.push((number, Vec::new()));
            }
            continue;
        }
        let Some((offset, hex)) = line.split_once("  ") else { continue };
        if offset.len() != 4 || !offset.bytes().all(|b| b.is_ascii_hexdigit()) {
            continue;
        }
        let offset = usize::from_str_radix(offset, 16).unwrap();
        let bytes = &mut out.last_mut().unwrap().1;
        assert_eq!(bytes.len(), offset, "offsets are contiguous in {line:?}");
        bytes.extend(hex.split_whitespace().map(|b| u8::from_str_radix(b, 16).unwrap()));
    }
    out
}

fn sample(number: u32) -> Vec<u8> {
    samples().into_iter().find(|(n, _)| *n == number).unwrap().1
}

const SEQ: u32 = 0x6553_f100;

#[test]
fn the_captures_file_holds_eleven_samples_whose_lengths_match_their_headers() {
    let all = samples();
    assert_eq!(all.iter().map(|(n, _)| *n).collect::<Vec<_>>(), (1..=11).collect::<Vec<_>>());
    for (n, bytes) in &all {
        assert_eq!(Header::parse(bytes).unwrap().len as usize, bytes.len(), "sample {n}");
        assert_eq!(messages(bytes).count(), 1, "sample {n}");
    }
}

#[test]
fn builds_the_sample_requests_byte_for_byte() {
    assert_eq!(res_mr_request(SEQ, 0), sample(1));
    assert_eq!(res_summary_request(SEQ + 1, Some(0)), sample(2));
    let dump = res_summary_request(7, None);
    let header = Header::parse(&dump).unwrap();
    assert_eq!((header.kind, header.flags, header.len), (5129, 0x0305, 24));
    assert_eq!(attrs(&dump[HEADER_LEN..]).map(|a| a.unwrap().kind).collect::<Vec<_>>(), [attr::DRIVER_DETAILS]);
    let get = get_devices_request(9);
    assert_eq!(Header::parse(&get).unwrap(), Header { len: 16, kind: 5121, flags: 0x0305, seq: 9, port: 0 });
    assert_eq!(get.len(), 16);
}

#[test]
fn decodes_the_request_samples() {
    for (n, op, flags, index) in [
        (1, cmd::RES_MR_GET, 0x0305, Some(0)),
        (2, cmd::RES_GET, 0x0005, Some(0)),
        (8, cmd::RES_MR_GET, 0x0305, None),
        (10, cmd::RES_MR_GET_RAW, 0x0305, Some(0)),
    ] {
        let bytes = sample(n);
        let Message::Reply { header, attrs: body } = messages(&bytes).next().unwrap().unwrap() else {
            panic!("sample {n}")
        };
        assert_eq!(split_type(header.kind), (CLIENT_NLDEV, op), "sample {n}");
        assert_eq!(header.flags, flags, "sample {n}");
        let mut dev_index = None;
        for a in attrs(body) {
            let a = a.unwrap();
            match a.kind {
                attr::DRIVER_DETAILS => assert_eq!(a.u8(), Ok(0)),
                attr::DEV_INDEX => dev_index = Some(a.u32().unwrap()),
                other => panic!("sample {n}: attribute {other}"),
            }
        }
        assert_eq!(dev_index, index, "sample {n}");
    }
}

#[test]
fn decodes_the_res_get_reply_and_its_ack() {
    let bytes = sample(3);
    let mut reader = ReplyReader::new(nldev_type(cmd::RES_GET), SEQ + 1, 100);
    let mut summaries = Vec::new();
    let progress = reader.feed(&bytes, |header, body| {
        assert_eq!(header.port, 12345);
        summaries.push(decode_res_summary(body)?);
        Ok(())
    });
    assert_eq!(progress, Ok(Progress::More), "a doit reply is followed by its ACK");
    let expected: Vec<(String, u64)> =
        [("pd", 4), ("cq", 9), ("qp", 18), ("cm_id", 0), ("mr", 37), ("ctx", 2), ("srq", 0)]
            .iter()
            .map(|(n, v)| (n.to_string(), *v))
            .collect();
    assert_eq!(summaries, [ResourceSummary { dev_index: 0, dev_name: "mlx5_0".into(), entries: expected }]);

    let ack = sample(4);
    let Message::Error { header, error, request } = messages(&ack).next().unwrap().unwrap() else { panic!("ACK") };
    assert_eq!((error, header.flags), (0, flags::CAPPED));
    assert_eq!(request, Some(Header { len: 32, kind: 5129, flags: 0x0005, seq: SEQ + 1, port: 0 }));
    assert_eq!(reader.feed(&ack, |_, _| panic!("an ACK has no body")), Ok(Progress::Finished));
}

#[test]
fn decodes_unprivileged_and_privileged_mr_parts() {
    let part = decode_mr_body(&sample(5));
    assert_eq!(part.dev_name, "mlx5_0");
    assert_eq!(part.dev_index, 0);
    assert_eq!(
        part.entries,
        [
            MrEntry { length: Some(9_633_792), mrn: Some(4), pdn: Some(2), pid: Some(4242), kern_name: None },
            MrEntry { length: Some(4096), mrn: Some(5), pdn: Some(2), pid: Some(4242), kern_name: None },
        ]
    );
    let privileged = decode_mr_body(&sample(7));
    assert_eq!(
        privileged.entries,
        [MrEntry { length: Some(9_633_792), mrn: Some(4), pdn: Some(2), pid: Some(4242), kern_name: None }]
    );
}

#[test]
fn an_implicit_odp_mr_reports_the_whole_address_space() {
    let bytes = hex_dump(IMPLICIT_ODP_PART);
    let mut built = mr_part(
        SEQ,
        (0, "mlx5_0"),
        &[
            mr_entry(&[
                attribute(attr::RES_MRLEN, &u64::MAX.to_ne_bytes()),
                attribute(attr::RES_MRN, &6u32.to_ne_bytes()),
                attribute(attr::RES_PDN, &3u32.to_ne_bytes()),
                attribute(attr::RES_PID, &4243u32.to_ne_bytes()),
            ]),
            mr_entry(&[
                attribute(attr::RES_MRLEN, &(2u64 << 20).to_ne_bytes()),
                attribute(attr::RES_MRN, &7u32.to_ne_bytes()),
                attribute(attr::RES_PDN, &3u32.to_ne_bytes()),
                attribute(attr::RES_PID, &4243u32.to_ne_bytes()),
            ]),
        ],
    );
    built[12..16].copy_from_slice(&12345u32.to_ne_bytes());
    assert_eq!(bytes, built, "the dump is what the uapi layout gives");
    let part = decode_mr_body(&bytes);
    let implicit: Vec<(Option<u32>, bool)> = part.entries.iter().map(|e| (e.mrn, e.is_implicit_odp())).collect();
    assert_eq!(implicit, [(Some(6), true), (Some(7), false)]);
    assert_eq!(part.entries[0].length, Some(u64::MAX));
}

fn decode_mr_body(bytes: &[u8]) -> MrDumpPart {
    let Message::Reply { header, attrs: body } = messages(bytes).next().unwrap().unwrap() else { panic!("reply") };
    assert_eq!(header.flags & flags::MULTI, flags::MULTI);
    decode_mr_part(body).unwrap()
}

#[test]
fn a_dump_ends_at_done_and_a_failed_dump_reports_its_errno() {
    let mut reader = ReplyReader::new(nldev_type(cmd::RES_MR_GET), SEQ, 100);
    let mut entries = 0;
    let count = |_: &Header, body: &[u8]| {
        entries += decode_mr_part(body)?.entries.len();
        Ok(())
    };
    assert_eq!(reader.feed(&sample(5), count), Ok(Progress::More));
    assert_eq!(reader.feed(&sample(6), |_, _| panic!("DONE has no body")), Ok(Progress::Finished));
    assert_eq!(entries, 2);

    let mut reader = ReplyReader::new(nldev_type(cmd::RES_MR_GET), SEQ + 2, 100);
    let err = reader.feed(&sample(9), |_, _| Ok(())).unwrap_err();
    assert_eq!(err, ReplyError::Kernel { error: -22 });
    assert_eq!(err.errno(), Some(libc::EINVAL));
    assert!(err.to_string().contains("Invalid argument"), "{err}");
}

#[test]
fn an_admin_only_request_is_refused_with_eperm_and_the_echoed_request() {
    let bytes = sample(11);
    let Message::Error { error, request, .. } = messages(&bytes).next().unwrap().unwrap() else { panic!("error") };
    assert_eq!(error, -1);
    let request = request.unwrap();
    assert_eq!((request.kind, request.len, request.seq), (nldev_type(cmd::RES_MR_GET_RAW), 32, SEQ + 3));
    // The whole request follows the error code: it is sample 10.
    assert_eq!(&bytes[HEADER_LEN + 4..], &sample(10)[..]);
    let mut reader = ReplyReader::new(nldev_type(cmd::RES_MR_GET_RAW), SEQ + 3, 100);
    let err = reader.feed(&bytes, |_, _| Ok(())).unwrap_err();
    assert_eq!(err.errno(), Some(libc::EPERM));
}

#[test]
fn a_multi_part_dump_across_datagrams_with_pad_kernel_owners_and_stale_messages() {
    let user = mr_entry(&[
        attribute(attr::RES_MRLEN, &(3u64 << 32).to_ne_bytes()),
        attribute(attr::RES_MRN, &1u32.to_ne_bytes()),
        attribute(attr::RES_PID, &77u32.to_ne_bytes()),
    ]);
    // Architectures without efficient unaligned access put a PAD before each u64.
    let padded = mr_entry(&[
        attribute(attr::PAD, &[]),
        attribute(attr::RES_MRLEN, &8192u64.to_ne_bytes()),
        string(attr::RES_KERN_NAME, "nvme_rdma"),
    ]);
    // Owner outside our PID namespace: no PID, no kernel name. And a driver nest flagged NESTED.
    let mut driver = attribute(attr::DRIVER, &string(54, "odp"));
    driver[2..4].copy_from_slice(&(attr::DRIVER | NLA_F_NESTED).to_ne_bytes());
    let foreign = mr_entry(&[
        attribute(attr::RES_MRLEN, &4096u64.to_ne_bytes()),
        attribute(attr::RES_PDN, &3u32.to_ne_bytes()),
        driver,
    ]);

    let seq = 500;
    let first = [
        mr_part(seq, (2, "mlx5_2"), &[user.clone(), padded]),
        mr_part(seq - 1, (2, "mlx5_2"), std::slice::from_ref(&user)),
    ]
    .concat();
    let second = [mr_part(seq, (2, "mlx5_2"), &[foreign]), done(seq, 0), mr_part(seq, (2, "mlx5_2"), &[user])].concat();

    let mut reader = ReplyReader::new(nldev_type(cmd::RES_MR_GET), seq, 100);
    let mut all = Vec::new();
    let mut on_reply = |_: &Header, body: &[u8]| {
        all.extend(decode_mr_part(body)?.entries);
        Ok(())
    };
    assert_eq!(reader.feed(&first, &mut on_reply), Ok(Progress::More));
    assert_eq!(reader.feed(&second, &mut on_reply), Ok(Progress::Finished), "nothing after DONE is read");
    assert_eq!(
        all,
        [
            MrEntry { length: Some(3 << 32), mrn: Some(1), pid: Some(77), ..MrEntry::default() },
            MrEntry { length: Some(8192), kern_name: Some("nvme_rdma".into()), ..MrEntry::default() },
            MrEntry { length: Some(4096), pdn: Some(3), ..MrEntry::default() },
        ],
        "the part with the old sequence number was skipped"
    );
}

#[test]
fn done_with_einval_and_error_with_eperm_built_from_constants() {
    let mut reader = ReplyReader::new(nldev_type(cmd::RES_MR_GET), 9, 10);
    assert_eq!(reader.feed(&done(9, -libc::EINVAL), |_, _| Ok(())), Err(ReplyError::Kernel { error: -22 }));

    let request = res_mr_request(10, 0);
    let error = message(msg::ERROR, 0, 10, &[(-libc::EPERM).to_ne_bytes().to_vec(), request.clone()].concat());
    let Message::Error { error: code, request: echoed, .. } = messages(&error).next().unwrap().unwrap() else {
        panic!()
    };
    assert_eq!((code, echoed), (-1, Some(Header::parse(&request).unwrap())));
    let mut reader = ReplyReader::new(nldev_type(cmd::RES_MR_GET), 10, 10);
    assert_eq!(reader.feed(&error, |_, _| Ok(())).unwrap_err().errno(), Some(libc::EPERM));

    let mut reader = ReplyReader::new(nldev_type(cmd::RES_MR_GET), 11, 10);
    assert_eq!(reader.feed(&message(msg::OVERRUN, 0, 11, &[]), |_, _| Ok(())), Err(ReplyError::Overrun));
    let mut reader = ReplyReader::new(nldev_type(cmd::RES_MR_GET), 12, 10);
    assert_eq!(
        reader.feed(&[message(msg::NOOP, 0, 12, &[]), done(12, 0)].concat(), |_, _| Ok(())),
        Ok(Progress::Finished)
    );
}

#[test]
fn replies_of_another_type_and_endless_replies_are_refused() {
    let part = mr_part(3, (0, "mlx5_0"), &[]);
    let mut reader = ReplyReader::new(nldev_type(cmd::RES_GET), 3, 10);
    assert!(matches!(reader.feed(&part, |_, _| Ok(())), Err(ReplyError::Decode(DecodeError::UnexpectedType { .. }))));
    let mut reader = ReplyReader::new(nldev_type(cmd::RES_MR_GET), 3, 3);
    let three = [part.clone(), part.clone(), part.clone()].concat();
    assert_eq!(reader.feed(&three, |_, _| Ok(())), Ok(Progress::More));
    assert_eq!(reader.feed(&part, |_, _| Ok(())), Err(ReplyError::TooManyMessages(3)));
}

#[test]
fn decodes_a_device_from_a_get_reply() {
    let body = [
        attribute(attr::DEV_INDEX, &3u32.to_ne_bytes()),
        string(attr::DEV_NAME, "efa_0"),
        attribute(attr::PORT_INDEX, &1u32.to_ne_bytes()),
        string(attr::FW_VERSION, "0.0.0.0"),
        attribute(attr::NODE_GUID, &0x0123_4567_89ab_cdefu64.to_ne_bytes()),
        string(attr::DEV_PROTOCOL, "ib"),
        attribute(99, &[1, 2, 3]),
    ]
    .concat();
    assert_eq!(
        decode_device(&body),
        Ok(DeviceInfo {
            index: 3,
            name: "efa_0".into(),
            ports: Some(1),
            fw_version: Some("0.0.0.0".into()),
            node_guid: Some(0x0123_4567_89ab_cdef),
            protocol: Some("ib".into()),
        })
    );
    assert!(matches!(decode_device(&body[8..]), Err(DecodeError::MissingAttribute { attribute: "DEV_INDEX", .. })));
}

#[test]
fn malformed_framing_is_an_error() {
    let good = sample(5);
    assert_eq!(messages(&good[..10]).next(), Some(Err(DecodeError::TruncatedHeader { have: 10 })));
    assert!(matches!(
        messages(&good[..100]).next(),
        Some(Err(DecodeError::BadMessageLength { len: 120, available: 100 }))
    ));
    let mut short = good.clone();
    short[0] = 8;
    assert!(matches!(messages(&short).next(), Some(Err(DecodeError::BadMessageLength { len: 8, .. }))));
    // An attribute claiming more bytes than its nest holds.
    let mut long_attr = good.clone();
    long_attr[0x2c] = 0xff;
    let Message::Reply { attrs: body, .. } = messages(&long_attr).next().unwrap().unwrap() else { panic!() };
    assert!(matches!(decode_mr_part(body), Err(DecodeError::BadAttributeLength { .. })));
    // A u64 of the wrong size.
    let bad_u64 = attribute(attr::RES_MRLEN, &[1, 2, 3, 4]);
    let part = mr_part(1, (0, "x"), &[mr_entry(&[bad_u64])]);
    let Message::Reply { attrs: body, .. } = messages(&part).next().unwrap().unwrap() else { panic!() };
    assert_eq!(decode_mr_part(body), Err(DecodeError::BadAttributeSize { kind: attr::RES_MRLEN, len: 4, expected: 8 }));
    // A summary entry without its value.
    let entry = attribute(attr::RES_SUMMARY_ENTRY, &string(attr::RES_SUMMARY_ENTRY_NAME, "mr"));
    let body = [
        attribute(attr::DEV_INDEX, &0u32.to_ne_bytes()),
        string(attr::DEV_NAME, "x"),
        attribute(attr::RES_SUMMARY, &entry),
    ]
    .concat();
    assert!(matches!(
        decode_res_summary(&body),
        Err(DecodeError::MissingAttribute { attribute: "RES_SUMMARY_ENTRY_CURR", .. })
    ));
    // DONE and ERROR without their error code.
    assert!(matches!(messages(&message(msg::DONE, 0, 1, &[])).next(), Some(Err(DecodeError::TruncatedPayload { .. }))));
    assert!(matches!(
        messages(&message(msg::ERROR, 0, 1, &[0, 0])).next(),
        Some(Err(DecodeError::TruncatedPayload { .. }))
    ));
    // Trailing bytes too short for an attribute header.
    assert!(matches!(attrs(&[4, 0, 1, 0, 9]).nth(1), Some(Err(DecodeError::BadAttributeLength { .. }))));
    assert!(attrs(&[]).next().is_none());
}

#[test]
fn strings_are_bounded_and_lossy() {
    let long = string(attr::DEV_NAME, &"x".repeat(1000));
    let a = attrs(&long).next().unwrap().unwrap();
    assert_eq!(a.string().len(), MAX_STRING_BYTES);
    let bad = attribute(attr::DEV_NAME, &[b'a', 0xff, b'b', 0]);
    assert_eq!(attrs(&bad).next().unwrap().unwrap().string(), "a\u{fffd}b");
    let unterminated = attribute(attr::DEV_NAME, b"mlx5_0");
    assert_eq!(attrs(&unterminated).next().unwrap().unwrap().string(), "mlx5_0");
}

/// Found by libFuzzer (scripts/fuzz.sh, target nldev): 120 invalid bytes became 360 bytes
/// of replacement characters, past the bound.
#[test]
fn invalid_utf8_does_not_stretch_a_string_past_the_bound() {
    let mut value = vec![0xb8u8; 120];
    value.push(0);
    let a = attribute(attr::DEV_NAME, &value);
    let string = attrs(&a).next().unwrap().unwrap().string();
    assert!(string.len() <= MAX_STRING_BYTES, "{} bytes", string.len());
    assert_eq!(string, "\u{fffd}".repeat(MAX_STRING_BYTES / 3));
}
