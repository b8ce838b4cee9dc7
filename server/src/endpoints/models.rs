//! `GET /v1/models` and `GET /v1/models/{id}`: the one model this server serves, with the
//! sampling defaults a request gets for the fields it leaves out.

use axum::extract::{Path, State};
use axum::Json;
use serde::Serialize;

use crate::request::defaults::GenerationDefaults;
use crate::response::error::ApiError;
use crate::response::Widened;
use crate::state::AppState;

/// The served model (`GET /v1/models`, `GET /v1/models/{id}`).
#[derive(Debug, Serialize)]
pub struct ModelCard {
    pub id: String,
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
    pub max_model_len: usize,
    /// The sampling defaults in force for fields a request leaves out.
    pub generation_defaults: Widened<GenerationDefaults>,
}

#[derive(Debug, Serialize)]
pub struct ModelList {
    pub object: &'static str,
    pub data: Vec<ModelCard>,
}

/// `GET /v1/models`: a list of one.
pub async fn models(State(state): State<AppState>) -> Json<ModelList> {
    Json(ModelList { object: "list", data: vec![model_card(&state)] })
}

/// The served model, as `GET /v1/models` lists it (the client's `models.retrieve`).
pub fn model_card(state: &AppState) -> ModelCard {
    ModelCard {
        id: state.model_id.clone(),
        object: "model",
        created: state.created,
        owned_by: "entrobatch",
        max_model_len: state.engine.info().max_model_len,
        generation_defaults: Widened(state.generation_defaults.clone()),
    }
}

pub async fn model(State(state): State<AppState>, Path(id): Path<String>) -> Result<Json<ModelCard>, ApiError> {
    state.check_model(Some(&id))?;
    Ok(Json(model_card(&state)))
}
