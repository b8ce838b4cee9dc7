//! The font every plot uses. plotters lays out text with real font metrics (SVG too) and draws
//! PNG text with the glyphs, and a fresh machine may have no system fonts, so DejaVu Sans
//! (Bitstream Vera licence, `plot/fonts/LICENSE-DejaVu.txt`) ships inside the binary. Call
//! `register` before building any chart.

use std::sync::Once;

use plotters::style::FontStyle;

static FONT: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");

/// Registers the embedded font for every family name plotters' defaults use; idempotent.
pub fn register() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        for family in ["sans-serif", "serif", "monospace"] {
            for style in [FontStyle::Normal, FontStyle::Bold] {
                // The bytes are a valid TrueType file checked in with the code; a failure
                // would only lose the text of bitmap plots, never the plot.
                if plotters::style::register_font(family, style, FONT).is_err() {
                    tracing::warn!("could not register the embedded plot font");
                    return;
                }
            }
        }
    });
}
