"""The run report: a run directory (or several) as one self-contained HTML file.

- ``collect.py`` reads a run directory — finished, still going or killed — into the
  report's data: the run's figures, one row per task, each task's trajectory;
- ``charts.py`` builds the Vega-Lite chart specs (with altair);
- ``page.py`` writes the HTML file: data, charts and the viewer's script inline;
- ``compare.py`` puts several runs side by side;
- ``assets/`` holds the viewer's stylesheet and script.
"""
