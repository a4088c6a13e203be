from ._sluice import Buffer as Buffer
from ._sluice import Pipeline as Pipeline
from ._sluice import PipelineError as PipelineError
from ._sluice import SpecError as SpecError
from ._sluice import check as check

__version__: str
from ._sluice import tune as tune
