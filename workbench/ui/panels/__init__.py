"""The app's panels, one module each. A panel observes the app state and updates its own widgets; it
writes only through the controller. A panel never imports another panel or a compute module."""
