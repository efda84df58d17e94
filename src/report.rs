//! One line for an error and its sources, for log fields and messages that cross threads.

/// `err` and each of its sources, `: `-separated. A source whose message its outer errors
/// already spelled out (as some libraries' messages embed their source's) is not repeated.
pub fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(next) = source {
        let part = next.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = next.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("outer")]
    struct Outer(#[source] std::io::Error);

    #[test]
    fn every_source_is_joined() {
        let err = Outer(std::io::Error::other("inner"));
        assert_eq!(error_chain(&err), "outer: inner");
    }

    #[derive(Debug, thiserror::Error)]
    #[error("cannot read the kubeconfig: {0}")]
    struct Embeds(#[source] std::io::Error);

    #[test]
    fn a_source_already_in_the_message_is_printed_once() {
        let err = Outer(std::io::Error::other(Embeds(std::io::Error::other(
            "no such file",
        ))));
        assert_eq!(
            error_chain(&err),
            "outer: cannot read the kubeconfig: no such file"
        );
    }
}
