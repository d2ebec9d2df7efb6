import numpy as np
from tests.integration.test_reference_equivalence import *  # noqa


class TestPeek:
    def test_peek(self, digits, diabetes):
        for run in (digits, diabetes):
            f, r = np.array(run.federated_losses), np.array(run.reference.step_losses)
            print(
                "\nsteps",
                len(f),
                "maxdiff",
                np.abs(f - r).max(),
                "final",
                run.federated.final_metrics,
                [e.seconds for e in run.federated.epochs],
            )
