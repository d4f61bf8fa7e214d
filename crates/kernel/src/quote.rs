//! How messages quote text that came from a file or a user: bounded, so that an error never
//! repeats a whole file back (shared by the configuration, the web configuration and the parsers'
//! callers).

/// The most characters of a value an error quotes back.
const SHOWN_CHARS: usize = 64;
/// The most bytes of any one part of an error message (a parser's own message included).
const MESSAGE_BYTES: usize = 1024;

/// `value` quoted as `{:?}` does, cut to its first [`SHOWN_CHARS`] characters, with its length
/// when it was longer: errors say which value without repeating all of it.
pub fn shown(value: &str) -> String {
    match value.char_indices().nth(SHOWN_CHARS) {
        None => format!("{value:?}"),
        Some((cut, _)) => format!("{:?}... ({} bytes)", &value[..cut], value.len()),
    }
}

/// `text` cut to [`MESSAGE_BYTES`] (at a character boundary), saying how long it was. Every part
/// of a configuration error is bounded: a value, a key or a parser's message may be as long as the
/// file.
pub fn bounded(text: &str) -> std::borrow::Cow<'_, str> {
    if text.len() <= MESSAGE_BYTES {
        return text.into();
    }
    let cut = (0..=MESSAGE_BYTES).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
    format!("{}... ({} bytes in all)", &text[..cut], text.len()).into()
}
