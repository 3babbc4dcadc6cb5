"""SavedModels of trained models, in TensorFlow Serving's layout (EXPORT_DIR/NAME/VERSION)."""

from t2t_lite.export.exporter import (
    ExportConfig,
    ExportError,
    ExportResult,
    TranslationModule,
    export_from_run,
    export_model,
    next_version,
)
from t2t_lite.export.searcher import BeamSearcher, SearchOptions
from t2t_lite.export.text_codec import SymbolCodec, codec_for

__all__ = [
    "BeamSearcher",
    "ExportConfig",
    "ExportError",
    "ExportResult",
    "SearchOptions",
    "SymbolCodec",
    "TranslationModule",
    "codec_for",
    "export_from_run",
    "export_model",
    "next_version",
]
