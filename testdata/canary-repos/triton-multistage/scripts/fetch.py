print("would fetch weights")
