"""The config checks by group, one module each; phaze.config_check runs them on the job config."""
