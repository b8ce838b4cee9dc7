//! llama-server's slot routes (`GET /slots`, `POST /slots/{id}?action=save|restore|erase`):
//! a 400 saying why, rather than a bare 404, since clients written for llama-server call them
//! on purpose.

use crate::response::error::ApiError;

pub async fn slots() -> ApiError {
    ApiError::bad_request(
        "there are no slots here: every request joins one continuous batch, and prompt prefixes are cached and \
         reused across requests automatically, so there is nothing to save, restore or erase",
    )
    .with_code("unsupported_route")
}
