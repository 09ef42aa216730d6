"""gpuscope's TensorBoard plugin: reads Kineto traces from the logdir and serves its views."""
