"""SavedModels of trained models, in TensorFlow Serving's layout (EXPORT_DIR/NAME/VERSION)."""

from t2t_lite.export.exporter import (
    ExportError,
    ExportResult,
    TranslationModule,
    export_from_run,
    export_model,
    export_search,
    next_version,
)
from t2t_lite.export.searcher import BeamSearcher
from t2t_lite.export.text_codec import SymbolCodec, codec_for

__all__ = [
    "BeamSearcher",
    "ExportError",
    "ExportResult",
    "SymbolCodec",
    "TranslationModule",
    "codec_for",
    "export_from_run",
    "export_model",
    "export_search",
    "next_version",
]
