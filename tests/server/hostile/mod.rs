//! Admission under hostile load, against the built binary: stalled uploads over HTTP/1.1 and
//! HTTP/2 ([`uploads`]), every connection slot held by four pods ([`slots`]), the byte budget
//! claimed by requests that send no body byte ([`budget`]), answers nobody reads ([`answers`]),
//! forged reviews that cost the most to decide ([`forged`]), the small-body reserve filled from
//! one address ([`reserve`]), HTTP/2 streams beyond an address's share ([`streams`]), an
//! answer waiting on a shut HTTP/2 window ([`window`]),
//! SIGTERM while streams and uploads are open ([`shutdown`]), and a one-minute soak of every
//! attack at once ([`soak`], `#[ignore]`: `make soak`). Memory is read from /proc and checked
//! against the arithmetic of docs/reliability.md; times are bounds, not measurements.

#[cfg(test)]
mod answers;
#[cfg(test)]
mod attack;
#[cfg(test)]
mod budget;
#[cfg(test)]
mod conns;
#[cfg(test)]
mod forged;
#[cfg(test)]
mod logs;
#[cfg(test)]
mod reserve;
#[cfg(test)]
mod served;
#[cfg(test)]
mod shutdown;
#[cfg(test)]
mod slots;
#[cfg(test)]
mod soak;
#[cfg(test)]
mod streams;
#[cfg(test)]
mod tokens;
#[cfg(test)]
mod uploads;
#[cfg(test)]
mod window;
