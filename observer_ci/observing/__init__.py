"""The public observer (torch side): ``InputObserver``, ``observe``/``register``,
argument alignment, pytrees, call families."""
