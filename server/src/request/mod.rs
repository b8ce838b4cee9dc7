//! What every generating endpoint shares to turn a request body into an engine `Request`:
//! the JSON extractor and its error mapping (`extract`), the fields both endpoints accept
//! (`protocol`), their conversion into `GenerationParams` (`params`, with the structured-output
//! forms in `structured`), and the server-wide defaults for fields a request leaves out
//! (`defaults`). An endpoint's own body and checks live in its folder under `endpoints/`.

pub mod defaults;
pub mod extract;
pub mod params;
pub mod protocol;
pub mod structured;
